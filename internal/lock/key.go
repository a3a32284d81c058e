package lock

// MaxKeyLen is the longest lock key, in bytes.
const MaxKeyLen = 200

// ValidKey reports whether s is a lock key: 1–200 of A-Z a-z 0-9 . _ : @ -,
// starting with a letter or digit. The key rule is the domain's: the API,
// the dashboard and the CLI all ask here. (A loop, not a regexp: it runs on
// every request. FuzzValidKey holds it to the pattern of api/openapi.yaml.)
func ValidKey(s string) bool {
	if len(s) == 0 || len(s) > MaxKeyLen {
		return false
	}
	return keyChars(s, true)
}

// ValidPrefix reports whether s can start a lock key, as a listing filter:
// at most 200 characters of the key alphabet, possibly empty or starting
// with a punctuation mark (it only narrows the list).
func ValidPrefix(s string) bool {
	return len(s) <= MaxKeyLen && keyChars(s, false)
}

// keyChars reports whether every byte of s is in the key alphabet; with
// first, the first one must be a letter or digit.
func keyChars(s string, first bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (i > 0 || !first) && (c == '.' || c == '_' || c == ':' || c == '@' || c == '-'):
		default:
			return false
		}
	}
	return true
}
