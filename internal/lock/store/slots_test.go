package store

import "testing"

func TestSlotOf(t *testing.T) {
	// Values from Redis's CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"foo":                   12182,
		"lockd:{order:1}:lease": SlotOf("order:1"),
		"{user1000}.following":  SlotOf("user1000"),
		"123456789":             12739,
		"lockd:{}:x":            SlotOf("lockd:{}:x"),
	} {
		if got := SlotOf(key); got != want {
			t.Errorf("SlotOf(%q) = %d, want %d", key, got, want)
		}
	}
	tags := SlotTags()
	for s, tag := range tags {
		if SlotOf(tag) != s {
			t.Fatalf("tag %q is in slot %d, not %d", tag, SlotOf(tag), s)
		}
	}
}
