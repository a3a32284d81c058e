package redistest

import "strings"

// KeySlot is the Redis Cluster hash slot of key (0–16383): CRC16-CCITT
// (XMODEM) of the key, or of its hash tag — the part between the first "{"
// and the next "}", when not empty — modulo 16384. It is the same as
// CLUSTER KEYSLOT, computed locally (go-redis keeps its own in an internal
// package).
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC16-CCITT XMODEM: polynomial 0x1021, initial value 0.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
