package watchhub

// watcherSet is an unordered set of watchers; each watcher knows its slot,
// so removal is O(1). A watcher is in at most one set at a time: the synced
// group's set for its range, or its stream's list of watchers behind.
type watcherSet struct{ ws []*watcher }

func (s *watcherSet) add(w *watcher) {
	w.slot = int32(len(s.ws))
	s.ws = append(s.ws, w)
}

func (s *watcherSet) remove(w *watcher) {
	last := s.ws[len(s.ws)-1]
	s.ws[w.slot] = last
	last.slot = w.slot
	s.ws[len(s.ws)-1] = nil
	s.ws = s.ws[:len(s.ws)-1]
	if cap(s.ws) > 64 && len(s.ws) < cap(s.ws)/4 {
		s.ws = append([]*watcher(nil), s.ws...)
	}
	w.slot = -1
}

// syncedGroup indexes the synced watchers by what they watch, so that a
// commit finds the watchers of each event's key without looking at the
// others: single-key watchers in a map, range watchers in an interval tree
// of their distinct ranges (etcd's watcherGroup).
type syncedGroup struct {
	keys   map[string]*watcherSet
	ranges rangeTree
	n      int
}

func (g *syncedGroup) add(w *watcher) {
	g.n++
	if w.single() {
		if g.keys == nil {
			g.keys = make(map[string]*watcherSet)
		}
		set := g.keys[w.key]
		if set == nil {
			set = &watcherSet{}
			g.keys[w.key] = set
		}
		set.add(w)
		return
	}
	g.ranges.get(w.key, w.end, w.inf).add(w)
}

func (g *syncedGroup) remove(w *watcher) {
	g.n--
	if w.single() {
		set := g.keys[w.key]
		set.remove(w)
		if len(set.ws) == 0 {
			delete(g.keys, w.key)
		}
		return
	}
	n := g.ranges.find(w.key, w.end, w.inf)
	n.set.remove(w)
	if len(n.set.ws) == 0 {
		g.ranges.delete(w.key, w.end, w.inf)
	}
}

// each calls fn for every synced watcher whose range holds key.
func (g *syncedGroup) each(key string, fn func(*watcher)) {
	if set := g.keys[key]; set != nil {
		for _, w := range set.ws {
			fn(w)
		}
	}
	g.ranges.stab(key, func(set *watcherSet) {
		for _, w := range set.ws {
			fn(w)
		}
	})
}

// rangeTree is an interval tree of distinct key ranges [start, end) (end
// infinite when inf), each with the set of watchers on it: a treap ordered
// by (start, inf, end), every node augmented with the greatest end in its
// subtree, so that a stabbing query skips every subtree that ends at or
// before the key.
type rangeTree struct {
	root *rangeNode
	seed uint64
}

type rangeNode struct {
	start, end  string
	inf         bool
	prio        uint64
	left, right *rangeNode
	maxEnd      string // greatest end in the subtree (meaningless if maxInf)
	maxInf      bool
	set         watcherSet
}

func cmpRange(s1, e1 string, i1 bool, s2, e2 string, i2 bool) int {
	switch {
	case s1 < s2:
		return -1
	case s1 > s2:
		return 1
	case i1 != i2:
		if i1 {
			return 1
		}
		return -1
	case i1 || e1 == e2:
		return 0
	case e1 < e2:
		return -1
	}
	return 1
}

func (n *rangeNode) fix() {
	n.maxEnd, n.maxInf = n.end, n.inf
	for _, c := range []*rangeNode{n.left, n.right} {
		if c == nil || n.maxInf {
			continue
		}
		if c.maxInf {
			n.maxInf = true
		} else if c.maxEnd > n.maxEnd {
			n.maxEnd = c.maxEnd
		}
	}
}

func (t *rangeTree) find(start, end string, inf bool) *rangeNode {
	n := t.root
	for n != nil {
		switch cmpRange(start, end, inf, n.start, n.end, n.inf) {
		case -1:
			n = n.left
		case 1:
			n = n.right
		default:
			return n
		}
	}
	return nil
}

// get returns the set of the range, adding the range if it is new.
func (t *rangeTree) get(start, end string, inf bool) *watcherSet {
	if n := t.find(start, end, inf); n != nil {
		return &n.set
	}
	// xorshift64*: priorities need only be independent of the keys.
	t.seed = t.seed*6364136223846793005 + 1442695040888963407
	n := &rangeNode{start: start, end: end, inf: inf, prio: t.seed ^ (t.seed >> 29)}
	n.fix()
	t.root = insertRange(t.root, n)
	return &n.set
}

func insertRange(root, n *rangeNode) *rangeNode {
	if root == nil {
		return n
	}
	if cmpRange(n.start, n.end, n.inf, root.start, root.end, root.inf) < 0 {
		root.left = insertRange(root.left, n)
		if root.left.prio > root.prio {
			root = rotateRight(root)
		}
	} else {
		root.right = insertRange(root.right, n)
		if root.right.prio > root.prio {
			root = rotateLeft(root)
		}
	}
	root.fix()
	return root
}

func rotateRight(n *rangeNode) *rangeNode {
	l := n.left
	n.left = l.right
	n.fix()
	l.right = n
	l.fix()
	return l
}

func rotateLeft(n *rangeNode) *rangeNode {
	r := n.right
	n.right = r.left
	n.fix()
	r.left = n
	r.fix()
	return r
}

func (t *rangeTree) delete(start, end string, inf bool) {
	t.root = deleteRange(t.root, start, end, inf)
}

func deleteRange(n *rangeNode, start, end string, inf bool) *rangeNode {
	if n == nil {
		return nil
	}
	switch cmpRange(start, end, inf, n.start, n.end, n.inf) {
	case -1:
		n.left = deleteRange(n.left, start, end, inf)
	case 1:
		n.right = deleteRange(n.right, start, end, inf)
	default:
		switch {
		case n.left == nil:
			return n.right
		case n.right == nil:
			return n.left
		case n.left.prio > n.right.prio:
			n = rotateRight(n)
			n.right = deleteRange(n.right, start, end, inf)
		default:
			n = rotateLeft(n)
			n.left = deleteRange(n.left, start, end, inf)
		}
	}
	n.fix()
	return n
}

// stab calls fn for the set of every range that holds key.
func (t *rangeTree) stab(key string, fn func(*watcherSet)) { stab(t.root, key, fn) }

func stab(n *rangeNode, key string, fn func(*watcherSet)) {
	for n != nil {
		if !n.maxInf && n.maxEnd <= key {
			return // every range below ends at or before key
		}
		stab(n.left, key, fn)
		if n.start > key {
			return // this range and those to its right start after key
		}
		if n.inf || key < n.end {
			fn(&n.set)
		}
		n = n.right
	}
}
