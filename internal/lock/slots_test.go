package lock

import "testing"

func TestSlotOf(t *testing.T) {
	// Values from Redis's CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"foo":                   12182,
		"lockd:{order:1}:lease": slotOf("order:1"),
		"{user1000}.following":  slotOf("user1000"),
		"123456789":             12739,
		"lockd:{}:x":            slotOf("lockd:{}:x"),
	} {
		if got := slotOf(key); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", key, got, want)
		}
	}
	tags := slotTags()
	for s, tag := range tags {
		if slotOf(tag) != s {
			t.Fatalf("tag %q is in slot %d, not %d", tag, slotOf(tag), s)
		}
	}
}
