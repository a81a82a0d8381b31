package orchestrator

import (
	"strings"
	"testing"
)

func TestChatTitle(t *testing.T) {
	long := strings.Repeat("a", 79) + "é" + "tail" // é straddles byte 80
	tests := []struct {
		name, request, want string
	}{
		{name: "short", request: "What time is it in Tokyo?", want: "What time is it in Tokyo?"},
		{name: "trimmed", request: "  hi \n", want: "hi"},
		{name: "first line", request: "Line one\nline two", want: "Line one…"},
		{name: "cut on a character boundary", request: long, want: strings.Repeat("a", 79) + "…"},
		{name: "exactly the limit", request: strings.Repeat("b", chatTitleBytes), want: strings.Repeat("b", chatTitleBytes)},
		{name: "blank", request: " \n ", want: "Chat"},
		{name: "blank first line", request: "\nsecond", want: "second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chatTitle(tt.request); got != tt.want {
				t.Errorf("chatTitle(%q) = %q, want %q", tt.request, got, tt.want)
			}
		})
	}
}
