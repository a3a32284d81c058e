package lock

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster puts a key in one of 16384 slots by CRC16 of its hash tag.
// The restart quarantine needs, for every lock key, a marker key in the
// same slot (a script may only touch keys of its own slot), so it keeps one
// short tag per slot.
const clusterSlots = 16384

// slotOf is the Cluster slot of a Redis key (CRC16-CCITT XMODEM of its
// hash tag, or of the whole key without one).
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % clusterSlots
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

// slotTags[s] is a short string whose slot is s, found once by trying
// numbers in base 36.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, clusterSlots)
	left := clusterSlots
	for n := 0; left > 0; n++ {
		t := strconv.FormatInt(int64(n), 36)
		if s := int(crc16(t)) % clusterSlots; tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return tags
})
