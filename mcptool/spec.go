package mcptool

import (
	"errors"
	"fmt"
	"strings"
)

// Spec configures one MCP server: the value of --mcp NAME=COMMAND [ARGS…].
type Spec struct {
	// Name prefixes the server's tools (NAME__TOOL) and names it in logs,
	// errors and Options.Confirm.
	Name string
	// Command is the program to run; it is looked up in PATH when it
	// contains no slash.
	Command string
	// Args are the program's arguments.
	Args []string
}

// String returns the spec as it would be given to --mcp, arguments quoted
// where needed.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('=')
	b.WriteString(quote(s.Command))
	for _, a := range s.Args {
		b.WriteByte(' ')
		b.WriteString(quote(a))
	}
	return b.String()
}

// maxNameLen leaves room for "__" and a tool name of at least one byte
// within the 64 bytes of a tool name.
const maxNameLen = 61

// ParseSpec parses NAME=COMMAND [ARGS…]. The command line is split at
// whitespace; single quotes keep everything up to the next single quote,
// double quotes keep everything up to the next unescaped double quote (a
// backslash escapes '"' and '\' inside them), and a backslash outside
// quotes escapes the next character. No other shell syntax is
// interpreted.
//
// NAME is made of letters, digits, '-' and '_', at most 61 bytes, and
// neither contains "__" nor ends with '_', so that NAME__TOOL splits
// back unambiguously.
func ParseSpec(value string) (Spec, error) {
	name, cmdline, ok := strings.Cut(value, "=")
	if !ok {
		return Spec{}, fmt.Errorf("mcp server %q: want NAME=COMMAND [ARGS…]", value)
	}
	name = strings.TrimSpace(name)
	if err := checkName(name); err != nil {
		return Spec{}, fmt.Errorf("mcp server %q: %w", value, err)
	}
	words, err := splitWords(cmdline)
	if err != nil {
		return Spec{}, fmt.Errorf("mcp server %q: %w", value, err)
	}
	if len(words) == 0 || words[0] == "" {
		return Spec{}, fmt.Errorf("mcp server %q: no command after '='", value)
	}
	return Spec{Name: name, Command: words[0], Args: words[1:]}, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty NAME before '='")
	case len(name) > maxNameLen:
		return fmt.Errorf("NAME %q is longer than %d bytes", name, maxNameLen)
	case strings.Contains(name, "__"):
		return fmt.Errorf(`NAME %q contains "__", which separates it from the tool name`, name)
	case strings.HasSuffix(name, "_"):
		return fmt.Errorf(`NAME %q ends with '_', which would run into the "__" separator`, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("NAME %q: only letters, digits, '-' and '_' are allowed, not %q", name, r)
		}
	}
	return nil
}

// splitWords splits a command line with simple shell-like quoting.
func splitWords(s string) ([]string, error) {
	var (
		words  []string
		word   strings.Builder
		inWord bool // distinguishes an empty quoted word from no word
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated single quote at byte %d", i)
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
					j++
				}
				word.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("unterminated double quote at byte %d", i)
			}
			i = j
			inWord = true
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("trailing backslash")
			}
			i++
			word.WriteByte(s[i])
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// quote returns s as one word for splitWords.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\r'\"\\") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
