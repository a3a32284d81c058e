package lock

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxReason is the longest force-release reason, in characters.
const MaxReason = 500

// CheckText says what is wrong with s as text that lockd stores and shows
// to people (a force-release reason, an idempotency key): more than maxLen
// characters, invalid UTF-8, or a character that is not printable. Control
// and format characters (newline, tab, ESC, NUL, U+202E) would reach an
// operator's terminal through `lockd history` as forged rows, colours or
// reversed text. The API and the dashboard both ask here, so they take the
// same text. The error reads after the field's name: "reason must be …".
func CheckText(s string, maxLen int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > maxLen {
		return fmt.Errorf("must be at most %d characters, got %d", maxLen, n)
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("must be printable; it has %U", c)
		}
	}
	return nil
}

// packable is s with the separator of packed history events (eventSep)
// replaced, so that no text splits an event into more fields. The API and
// the dashboard refuse control characters (CheckText) before they get
// here; this guards the engine's other callers.
func packable(s string) string {
	if !strings.Contains(s, eventSep) {
		return s
	}
	return strings.ReplaceAll(s, eventSep, "\uFFFD")
}
