package store

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is how many slots Redis Cluster has: it puts a key in one of them
// by CRC16 of its hash tag. A script may only touch keys of its own slot,
// so a caller that needs a key beside another (in the same slot) takes the
// slot's tag from SlotTags.
const Slots = 16384

// SlotOf is the Cluster slot of a Redis key (CRC16-CCITT XMODEM of its
// hash tag, or of the whole key without one).
func SlotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % Slots
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// SlotTags returns, at index s, a short string whose slot is s (found once
// by trying numbers in base 36): the hash tag of a key in slot s. Callers
// must not change the slice.
var SlotTags = sync.OnceValue(func() []string {
	tags := make([]string, Slots)
	left := Slots
	for n := 0; left > 0; n++ {
		t := strconv.FormatInt(int64(n), 36)
		if s := int(crc16(t)) % Slots; tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return tags
})
