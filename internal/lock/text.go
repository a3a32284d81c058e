package lock

import (
	"fmt"
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
