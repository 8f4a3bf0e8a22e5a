//! Binary and double binary trees over nodes (NCCL 2.30.7 `src/graph/trees.cc`:
//! `ncclGetBtree`, `ncclGetDtree`).
//!
//! The binary tree is rooted at 0 with a single child; node `r` sits at the level of its
//! lowest set bit (an in-order layout). The double binary tree pairs it with its mirror
//! (even node counts) or its shift by one (odd counts), so a leaf of one tree is an inner
//! node of the other.

/// One node's place in a binary tree. `-1` = none, as NCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BtreeNode {
    /// Parent (-1 at the root).
    pub up: i32,
    /// First child (smaller index), -1 if none.
    pub down0: i32,
    /// Second child (larger index), -1 if none.
    pub down1: i32,
    /// 0 when this node is its parent's `down0`, 1 when `down1` (0 at the root, which NCCL
    /// leaves at its caller-initialised 0).
    pub parent_child_type: i32,
}

/// `ncclGetBtree(nranks, rank)`.
pub fn btree(nranks: i32, rank: i32) -> BtreeNode {
    let mut bit = 1;
    while bit < nranks {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return BtreeNode {
            up: -1,
            down0: -1,
            down1: if nranks > 1 { bit >> 1 } else { -1 },
            parent_child_type: 0,
        };
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= nranks {
        up = rank ^ bit;
    }
    let parent_child_type = if rank < up { 0 } else { 1 };
    let mut lowbit = bit >> 1;
    let down0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut down1 = if lowbit == 0 { -1 } else { rank + lowbit };
    // As NCCL: the loop re-evaluates `rank + lowbit` before halving.
    while down1 >= nranks {
        down1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    BtreeNode {
        up,
        down0,
        down1,
        parent_child_type,
    }
}

/// `ncclGetDtree(nranks, rank)`: (tree 0, tree 1).
pub fn dtree(nranks: i32, rank: i32) -> (BtreeNode, BtreeNode) {
    let t0 = btree(nranks, rank);
    let t1 = if nranks % 2 == 1 {
        let s = btree(nranks, (rank - 1 + nranks) % nranks);
        let m = |v: i32| if v == -1 { -1 } else { (v + 1) % nranks };
        BtreeNode {
            up: m(s.up),
            down0: m(s.down0),
            down1: m(s.down1),
            parent_child_type: s.parent_child_type,
        }
    } else {
        let s = btree(nranks, nranks - 1 - rank);
        let m = |v: i32| if v == -1 { -1 } else { nranks - 1 - v };
        BtreeNode {
            up: m(s.up),
            down0: m(s.down0),
            down1: m(s.down1),
            parent_child_type: s.parent_child_type,
        }
    };
    (t0, t1)
}

/// `log2i`: floor(log2(n)), 0 for n ≤ 1.
pub fn log2i(mut n: i64) -> i64 {
    let mut l = 0;
    loop {
        n >>= 1;
        if n == 0 {
            break;
        }
        l += 1;
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(up: i32, d0: i32, d1: i32) -> (i32, i32, i32) {
        (up, d0, d1)
    }

    fn f(n: BtreeNode) -> (i32, i32, i32) {
        (n.up, n.down0, n.down1)
    }

    #[test]
    fn illustrated_tree_of_14() {
        // trees.cc's illustration: 0 -> 8 -> {4 -> {2, 6}, 12 -> {10, 13}}.
        assert_eq!(f(btree(14, 0)), t(-1, -1, 8));
        assert_eq!(f(btree(14, 8)), t(0, 4, 12));
        assert_eq!(f(btree(14, 12)), t(8, 10, 13));
        assert_eq!(f(btree(14, 13)), t(12, -1, -1));
        assert_eq!(btree(14, 13).parent_child_type, 1);
    }

    #[test]
    fn log2() {
        assert_eq!(log2i(1), 0);
        assert_eq!(log2i(2), 1);
        assert_eq!(log2i(7), 2);
        assert_eq!(log2i(8), 3);
    }
}
