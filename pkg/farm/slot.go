package farm

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// InSlot reports whether at falls in key's slot: the slot-wide window that
// starts once every period, at an offset of key's own (from a hash of it),
// so that what a fleet does once a period per node (a full report kept, the
// facts sent to PuppetDB) spreads evenly over the period instead of all
// happening at midnight. A node that checks in every slot has exactly one
// check-in in it per period. A period of 0 or less is never in the slot.
func InSlot(key string, at time.Time, period, slot time.Duration) bool {
	if period <= 0 {
		return false
	}
	e := uint64(period)
	h := sha256.Sum256([]byte(key))
	offset := binary.BigEndian.Uint64(h[:8]) % e
	phase := (uint64(at.UnixNano())%e + e - offset) % e
	return time.Duration(phase) < slot
}
