//! perf's tree of a dso's symbols: a red-black tree keyed by start address, built
//! and balanced as Linux's `lib/rbtree.c` does, because perf's lookup depends on
//! its shape.
//!
//! The symbols of a file may overlap (a zero-sized `_init` stretched to the next
//! symbol covers the `.plt` entries synthesized afterwards). perf's lookup
//! (`symbols__find`) walks from the root and stops at the first node that covers
//! the address, going right past a node whose end it is beyond, so an address
//! that an ancestor covers but the node on the path does not is not found. To
//! name addresses as perf does, the tree is rebuilt here with the same
//! insertions (equal starts go right), the same erasures and the same
//! rebalancing, then searched the same way.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    start: u64,
    end: u64,
    left: u32,
    right: u32,
    parent: u32,
    red: bool,
}

/// A red-black tree of `[start, end]` entries (entry ids are insertion order).
#[derive(Clone, Debug, Default)]
pub struct Tree {
    nodes: Vec<Node>,
    root: u32,
    /// Entries erased (ids stay allocated).
    erased: Vec<bool>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Self {
        Tree {
            nodes: Vec::new(),
            root: NIL,
            erased: Vec::new(),
        }
    }

    /// Inserts `[start, end]` below the entries of equal start
    /// (`__symbols__insert`); returns its id.
    pub fn insert(&mut self, start: u64, end: u64) -> u32 {
        self.insert_by(start, end, |_, at| start < at)
    }

    /// Inserts `[start, end]`, going left of each node `go_left` says (given
    /// the node's id and start) and else right; returns its id.
    pub fn insert_by(&mut self, start: u64, end: u64, go_left: impl Fn(u32, u64) -> bool) -> u32 {
        let id = self.nodes.len() as u32;
        let mut parent = NIL;
        let mut left = false;
        let mut p = self.root;
        while p != NIL {
            parent = p;
            left = go_left(p, self.nodes[p as usize].start);
            p = if left {
                self.nodes[p as usize].left
            } else {
                self.nodes[p as usize].right
            };
        }
        self.nodes.push(Node {
            start,
            end,
            left: NIL,
            right: NIL,
            parent,
            red: true,
        });
        self.erased.push(false);
        if parent == NIL {
            self.root = id;
        } else if left {
            self.nodes[parent as usize].left = id;
        } else {
            self.nodes[parent as usize].right = id;
        }
        self.insert_fixup(id);
        id
    }

    fn n(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    fn nm(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }

    fn is_red(&self, i: u32) -> bool {
        i != NIL && self.n(i).red
    }

    /// Puts `new` where `old` hangs from `parent` (or at the root).
    fn replace_child(&mut self, parent: u32, old: u32, new: u32) {
        if parent == NIL {
            self.root = new;
        } else if self.n(parent).left == old {
            self.nm(parent).left = new;
        } else {
            self.nm(parent).right = new;
        }
    }

    fn rotate_left(&mut self, x: u32) {
        let y = self.n(x).right;
        let yl = self.n(y).left;
        self.nm(x).right = yl;
        if yl != NIL {
            self.nm(yl).parent = x;
        }
        let xp = self.n(x).parent;
        self.nm(y).parent = xp;
        self.replace_child(xp, x, y);
        self.nm(y).left = x;
        self.nm(x).parent = y;
    }

    fn rotate_right(&mut self, x: u32) {
        let y = self.n(x).left;
        let yr = self.n(y).right;
        self.nm(x).left = yr;
        if yr != NIL {
            self.nm(yr).parent = x;
        }
        let xp = self.n(x).parent;
        self.nm(y).parent = xp;
        self.replace_child(xp, x, y);
        self.nm(y).right = x;
        self.nm(x).parent = y;
    }

    fn insert_fixup(&mut self, mut z: u32) {
        loop {
            let p = self.n(z).parent;
            if p == NIL {
                self.nm(z).red = false;
                return;
            }
            if !self.n(p).red {
                return;
            }
            // A red parent is never the root: the grandparent exists.
            let g = self.n(p).parent;
            let parent_is_left = self.n(g).left == p;
            let uncle = if parent_is_left {
                self.n(g).right
            } else {
                self.n(g).left
            };
            if self.is_red(uncle) {
                self.nm(p).red = false;
                self.nm(uncle).red = false;
                self.nm(g).red = true;
                z = g;
                continue;
            }
            let mut p = p;
            if parent_is_left {
                if self.n(p).right == z {
                    self.rotate_left(p);
                    p = z;
                }
                self.rotate_right(g);
            } else {
                if self.n(p).left == z {
                    self.rotate_right(p);
                    p = z;
                }
                self.rotate_left(g);
            }
            self.nm(p).red = false;
            self.nm(g).red = true;
            return;
        }
    }

    /// Removes entry `z` (`rb_erase`: a node with two children is replaced by its
    /// successor, which takes its place and colour).
    pub fn erase(&mut self, z: u32) {
        let Node {
            left,
            right,
            parent,
            red,
            ..
        } = *self.n(z);
        // Where a black node went missing: (parent, which side), if anywhere.
        let rebalance: Option<u32>;
        if left == NIL || right == NIL {
            let child = if left == NIL { right } else { left };
            self.replace_child(parent, z, child);
            if child != NIL {
                // The only child of a node is red: it takes the node's colour.
                let c = self.nm(child);
                c.parent = parent;
                c.red = red;
                rebalance = None;
            } else {
                rebalance = (!red).then_some(parent);
            }
        } else {
            let mut succ = right;
            let succ_parent;
            let child2;
            if self.n(succ).left == NIL {
                succ_parent = succ;
                child2 = self.n(succ).right;
            } else {
                while self.n(succ).left != NIL {
                    succ = self.n(succ).left;
                }
                succ_parent = self.n(succ).parent;
                child2 = self.n(succ).right;
                self.nm(succ_parent).left = child2;
                self.nm(succ).right = right;
                self.nm(right).parent = succ;
            }
            self.nm(succ).left = left;
            self.nm(left).parent = succ;
            self.replace_child(parent, z, succ);
            let succ_red = self.n(succ).red;
            self.nm(succ).parent = parent;
            self.nm(succ).red = red;
            if child2 != NIL {
                self.nm(child2).parent = succ_parent;
                self.nm(child2).red = false;
                rebalance = None;
            } else {
                rebalance = (!succ_red).then_some(succ_parent);
            }
        }
        self.erased[z as usize] = true;
        if let Some(p) = rebalance {
            if p != NIL {
                self.erase_fixup(p);
            }
        }
    }

    /// Restores the black heights after a black node left `parent`'s side whose
    /// child is now `node` (`NIL` at first). Written for either side `d` (0:
    /// left, 1: right), the sibling's on the other side `o`.
    fn erase_fixup(&mut self, mut parent: u32) {
        let mut node = NIL;
        loop {
            // The short side is the one `node` hangs on; with `node` NIL, it is the
            // side whose child is missing (the other child exists).
            let d = usize::from(self.n(parent).right == node);
            let o = 1 - d;
            let mut sib = self.child(parent, o);
            if self.is_red(sib) {
                self.nm(sib).red = false;
                self.nm(parent).red = true;
                self.rotate(parent, d);
                sib = self.child(parent, o);
            }
            let (near, far) = (self.child(sib, d), self.child(sib, o));
            if !self.is_red(near) && !self.is_red(far) {
                self.nm(sib).red = true;
                if self.n(parent).red {
                    self.nm(parent).red = false;
                    return;
                }
                node = parent;
                parent = self.n(node).parent;
                if parent == NIL {
                    return;
                }
                continue;
            }
            if !self.is_red(far) {
                // The near nephew is red: turn it into the far one.
                self.nm(near).red = false;
                self.nm(sib).red = true;
                self.rotate(sib, o);
                sib = self.child(parent, o);
            }
            let far = self.child(sib, o);
            self.nm(sib).red = self.n(parent).red;
            self.nm(parent).red = false;
            self.nm(far).red = false;
            self.rotate(parent, d);
            return;
        }
    }

    /// `n`'s child on side `dir` (0: left, 1: right).
    fn child(&self, n: u32, dir: usize) -> u32 {
        if dir == 0 {
            self.n(n).left
        } else {
            self.n(n).right
        }
    }

    /// Rotates `n` towards side `dir` (0: left, 1: right).
    fn rotate(&mut self, n: u32, dir: usize) {
        if dir == 0 {
            self.rotate_left(n);
        } else {
            self.rotate_right(n);
        }
    }

    /// The entries in order (by start; equal starts in insertion order).
    pub fn in_order(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack = Vec::new();
        let mut n = self.root;
        while n != NIL || !stack.is_empty() {
            while n != NIL {
                stack.push(n);
                n = self.n(n).left;
            }
            let Some(top) = stack.pop() else { break };
            out.push(top);
            n = self.n(top).right;
        }
        out
    }

    /// Entry `id`'s `[start, end]`.
    #[cfg(test)]
    pub fn range(&self, id: u32) -> (u64, u64) {
        (self.n(id).start, self.n(id).end)
    }

    /// Sets entry `id`'s end (`symbols__fixup_end`).
    pub fn set_end(&mut self, id: u32, end: u64) {
        self.nm(id).end = end;
    }

    /// Whether entry `id` was erased.
    pub fn is_erased(&self, id: u32) -> bool {
        self.erased[id as usize]
    }

    /// perf's `symbols__find`: the first entry on the path from the root that
    /// holds `ip` (`[start, end)`, or `start` itself for an empty one).
    pub fn find(&self, ip: u64) -> Option<u32> {
        let mut n = self.root;
        while n != NIL {
            let s = self.n(n);
            if ip < s.start {
                n = s.left;
            } else if ip > s.end || (ip == s.end && ip != s.start) {
                n = s.right;
            } else {
                return Some(n);
            }
        }
        None
    }

    /// Checks the red-black properties and parent links (tests).
    #[cfg(test)]
    pub fn check(&self) -> usize {
        fn walk(t: &Tree, n: u32, parent: u32) -> usize {
            if n == NIL {
                return 1;
            }
            let node = t.n(n);
            assert_eq!(node.parent, parent, "parent link of {n}");
            if node.red {
                assert!(!t.is_red(node.left) && !t.is_red(node.right), "red {n}");
            }
            if node.left != NIL {
                assert!(t.n(node.left).start <= node.start);
            }
            if node.right != NIL {
                assert!(t.n(node.right).start >= node.start);
            }
            let l = walk(t, node.left, n);
            let r = walk(t, node.right, n);
            assert_eq!(l, r, "black height at {n}");
            l + usize::from(!node.red)
        }
        assert!(!self.is_red(self.root));
        walk(self, self.root, NIL)
    }
}
