// Package metricstest reads Prometheus's text exposition for tests: the
// samples of a /metrics page, looked up by name and labels. It knows
// nothing of Baton's metrics; the tests say what they expect.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Page is one scrape: every sample, by series.
type Page struct {
	Text    string
	samples []sample
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// Scrape GETs url (a /metrics address) and parses what it answers.
func Scrape(t testing.TB, url string) Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	p, err := Parse(string(body))
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return p
}

// Parse reads a text exposition (comments are skipped).
func Parse(text string) (Page, error) {
	p := Page{Text: text}
	for i, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return p, fmt.Errorf("line %d %q: %w", i+1, line, err)
		}
		p.samples = append(p.samples, s)
	}
	return p, nil
}

func parseLine(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		s.name = line[:i]
		rest = line[i+1:]
		for !strings.HasPrefix(rest, "}") {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return s, fmt.Errorf("bad labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return s, fmt.Errorf("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c, rest = rest[0], rest[1:]
					if c == 'n' {
						c = '\n'
					}
				}
				val.WriteByte(c)
			}
			s.labels[key] = val.String()
			rest = strings.TrimPrefix(rest, ",")
		}
		rest = strings.TrimSpace(rest[1:])
	} else {
		name, after, ok := strings.Cut(line, " ")
		if !ok {
			return s, fmt.Errorf("no value")
		}
		s.name, rest = name, after
	}
	fields := strings.Fields(rest) // value, and a timestamp if any
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value: %w", err)
	}
	s.value = v
	return s, nil
}

// Value returns the sample of name whose labels are exactly those of
// series, written as in the exposition (`a="x",b="y"`, any order; "" for
// none).
func (p Page) Value(name, series string) (float64, bool) {
	want, err := parseLine(name + "{" + series + "} 0")
	if err != nil {
		return 0, false
	}
	for _, s := range p.samples {
		if s.name == name && maps.Equal(s.labels, want.labels) {
			return s.value, true
		}
	}
	return 0, false
}

// Sum adds the samples of name whose labels include every one of series
// (the others summed over), and reports whether there was any.
func (p Page) Sum(name, series string) (float64, bool) {
	want, err := parseLine(name + "{" + series + "} 0")
	if err != nil {
		return 0, false
	}
	total, found := 0.0, false
next:
	for _, s := range p.samples {
		if s.name != name {
			continue
		}
		for k, v := range want.labels {
			if s.labels[k] != v {
				continue next
			}
		}
		total, found = total+s.value, true
	}
	return total, found
}

// Has reports whether the page has a sample of family name (a counter or
// gauge of that name, or a histogram's name_count).
func (p Page) Has(name string) bool {
	for _, s := range p.samples {
		if s.name == name || s.name == name+"_count" {
			return true
		}
	}
	return false
}

// Lines returns the page's lines that start with prefix, for a failure
// message.
func (p Page) Lines(prefix string) string {
	var out []string
	for _, line := range strings.Split(p.Text, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
