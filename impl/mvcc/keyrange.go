package mvcc

// InRange reports whether k lies in the range that key and rangeEnd denote,
// with etcd's conventions: an empty rangeEnd means the single key key;
// "\x00" means every key ≥ key; otherwise the half-open interval [key,
// rangeEnd), which is empty when rangeEnd ≤ key.
func InRange(key, rangeEnd, k string) bool {
	switch rangeEnd {
	case "":
		return k == key
	case "\x00":
		return k >= key
	}
	return key <= k && k < rangeEnd
}

// PrefixEnd returns the range end that, with prefix as the key, denotes every
// key starting with prefix: prefix with its last byte below 0xff incremented
// and what follows it dropped. When there is no such end (every byte is 0xff,
// or prefix is empty) it returns "\x00": every key ≥ prefix.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// emptyRange reports whether (key, rangeEnd) denotes no key at all: an
// explicit end at or below the start.
func emptyRange(key, rangeEnd string) bool {
	return rangeEnd != "" && rangeEnd != "\x00" && rangeEnd <= key
}
