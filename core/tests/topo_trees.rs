//! Double binary trees: the node-level trees for 1..64 nodes against the rules of
//! `docs/reference/nccl-graph-tuning.md` §2.8 (its 2-, 4-, 5- and 8-node examples as fixed cases), and the
//! rank-level trees the connection step builds, consistent across ranks.

use ferroccl::graph::trees::{BtreeNode, btree, dtree};
use ferroccl::graph::{CommTopology, MAX_TREE_ARITY};
use ferroccl::topo::TopoParams;
use ferroccl::topo::model::HardwareModel;
use ferroccl::topo::xml::{self, Schema};

fn t(n: BtreeNode) -> (i32, i32, i32) {
    (n.up, n.down0, n.down1)
}

/// Checks one tree over `n` nodes: one root, every parent lists its child in the slot the
/// child's `parent_child_type` names, every child names its parent, all nodes reachable.
fn check_tree(n: i32, nodes: &[BtreeNode]) {
    let roots: Vec<i32> = (0..n).filter(|&r| nodes[r as usize].up == -1).collect();
    assert_eq!(roots.len(), 1, "n={n}: roots {roots:?}");
    for r in 0..n {
        let me = nodes[r as usize];
        for (slot, d) in [(0, me.down0), (1, me.down1)] {
            if d == -1 {
                continue;
            }
            assert!((0..n).contains(&d), "n={n} r={r}: child {d} out of range");
            let c = nodes[d as usize];
            assert_eq!(c.up, r, "n={n}: {d}'s parent should be {r}");
            assert_eq!(c.parent_child_type, slot, "n={n}: {d} is child slot {slot} of {r}");
        }
        if me.up != -1 {
            let p = nodes[me.up as usize];
            assert!(
                p.down0 == r || p.down1 == r,
                "n={n}: {r} not a child of its parent {}",
                me.up
            );
        }
    }
    // Reachability from the root.
    let mut seen = vec![false; n as usize];
    let mut stack = vec![roots[0]];
    while let Some(r) = stack.pop() {
        assert!(!seen[r as usize], "n={n}: cycle at {r}");
        seen[r as usize] = true;
        let me = nodes[r as usize];
        stack.extend([me.down0, me.down1].into_iter().filter(|&d| d != -1));
    }
    assert!(seen.iter().all(|&s| s), "n={n}: unreachable nodes");
}

#[test]
fn double_binary_trees_for_1_to_64_nodes_follow_the_rules() {
    for n in 1..=64 {
        let t0: Vec<BtreeNode> = (0..n).map(|r| dtree(n, r).0).collect();
        let t1: Vec<BtreeNode> = (0..n).map(|r| dtree(n, r).1).collect();
        check_tree(n, &t0);
        check_tree(n, &t1);
        // Tree 0 is rooted at 0 with a single child (down0 = -1).
        assert_eq!(t0[0].up, -1);
        assert_eq!(t0[0].down0, -1);
        for r in 0..n {
            // Node r sits at the level of its lowest set bit: its children are r ± 2^(k-1).
            if r > 0 {
                let low = r & -r;
                let me = t0[r as usize];
                if low > 1 {
                    assert_eq!(me.down0, r - low / 2, "n={n} r={r}");
                }
            }
            // Tree 1: mirror (even n) or shift by one (odd n) of tree 0.
            let map = |v: i32, f: &dyn Fn(i32) -> i32| if v == -1 { -1 } else { f(v) };
            let expect = if n % 2 == 0 {
                let s = btree(n, n - 1 - r);
                let f = |v| n - 1 - v;
                (map(s.up, &f), map(s.down0, &f), map(s.down1, &f))
            } else {
                let s = btree(n, (r - 1 + n) % n);
                let f = |v| (v + 1) % n;
                (map(s.up, &f), map(s.down0, &f), map(s.down1, &f))
            };
            assert_eq!(t(t1[r as usize]), expect, "n={n} r={r}");
        }
        // Each node has at most two children per tree and at most ~2 inter-node flows per
        // direction over both trees: up to 1 parent + 2 children in each.
        if n >= 3 {
            // No node is a leaf in both trees (the point of the double tree).
            let leaf = |v: &BtreeNode| v.down0 == -1 && v.down1 == -1;
            for r in 0..n as usize {
                assert!(
                    !(leaf(&t0[r]) && leaf(&t1[r])),
                    "n={n}: node {r} is a leaf in both trees"
                );
            }
        }
    }
}

#[test]
fn the_reference_examples() {
    // §2.8, 4 nodes (up / down0 / down1 / type): tree 0 = 0 -> 2 -> {1, 3}, tree 1 = 3 -> 1 -> {2, 0}.
    let four = [
        ((-1, -1, 2), None, (1, -1, -1), Some(1)),
        ((2, -1, -1), Some(0), (3, 2, 0), Some(1)),
        ((0, 1, 3), Some(1), (1, -1, -1), Some(0)),
        ((2, -1, -1), Some(1), (-1, -1, 1), None),
    ];
    for (r, (a, ta, b, tb)) in four.iter().enumerate() {
        let (x, y) = dtree(4, r as i32);
        assert_eq!(t(x), *a, "4 nodes, node {r}, tree 0");
        assert_eq!(t(y), *b, "4 nodes, node {r}, tree 1");
        if let Some(ta) = ta {
            assert_eq!(x.parent_child_type, *ta);
        }
        if let Some(tb) = tb {
            assert_eq!(y.parent_child_type, *tb);
        }
    }
    // §2.8, 8 nodes.
    let eight = [
        ((-1, -1, 4), (1, -1, -1)),
        ((2, -1, -1), (3, 2, 0)),
        ((4, 1, 3), (1, -1, -1)),
        ((2, -1, -1), (7, 5, 1)),
        ((0, 2, 6), (5, -1, -1)),
        ((6, -1, -1), (3, 6, 4)),
        ((4, 5, 7), (5, -1, -1)),
        ((6, -1, -1), (-1, -1, 3)),
    ];
    let types = [
        (None, Some(1)),
        (Some(0), Some(1)),
        (Some(0), Some(0)),
        (Some(1), Some(1)),
        (Some(1), Some(1)),
        (Some(0), Some(0)),
        (Some(1), Some(0)),
        (Some(1), None),
    ];
    for r in 0..8 {
        let (x, y) = dtree(8, r as i32);
        assert_eq!((t(x), t(y)), eight[r], "8 nodes, node {r}");
        if let Some(a) = types[r].0 {
            assert_eq!(x.parent_child_type, a, "8 nodes, node {r}, tree 0 type");
        }
        if let Some(b) = types[r].1 {
            assert_eq!(y.parent_child_type, b, "8 nodes, node {r}, tree 1 type");
        }
    }
    // 5 nodes (shift): tree 0 = 0 -> 4 -> 2 -> {1, 3}; tree 1 = 1 -> 0 -> 3 -> {2, 4}, where
    // 0 -> 3 is slot down0 (btree(5, 4) = (0, 2, -1), shifted by one).
    let five0 = [(-1, -1, 4), (2, -1, -1), (4, 1, 3), (2, -1, -1), (0, 2, -1)];
    let five1 = [(1, 3, -1), (-1, -1, 0), (3, -1, -1), (0, 2, 4), (3, -1, -1)];
    for r in 0..5 {
        let (x, y) = dtree(5, r as i32);
        assert_eq!(t(x), five0[r], "5 nodes, node {r}, tree 0");
        assert_eq!(t(y), five1[r], "5 nodes, node {r}, tree 1");
    }
    // 2 nodes: 0 -> 1 and 1 -> 0.
    assert_eq!(t(dtree(2, 0).0), (-1, -1, 1));
    assert_eq!(t(dtree(2, 1).0), (0, -1, -1));
    assert_eq!(t(dtree(2, 0).1), (1, -1, -1));
    assert_eq!(t(dtree(2, 1).1), (-1, -1, 0));
    // 1 node: alone.
    assert_eq!(t(dtree(1, 0).0), (-1, -1, -1));
    assert_eq!(t(dtree(1, 0).1), (-1, -1, -1));
}

/// A machine with `gpus` GPUs and one 100 Gb/s NIC behind a Gen3 switch (12 GB/s links):
/// one search channel, GPUs in PCI order.
fn machine(gpus: usize) -> String {
    let mut s = String::from(
        r#"<system version="1"><cpu numaid="0" arch="x86_64" vendor="AuthenticAMD"><pci busid="0000:10:00.0" class="0x060400" link_speed="8 GT/s" link_width="16">"#,
    );
    for g in 0..gpus {
        s.push_str(&format!(
            r#"<pci busid="0000:{:02x}:00.0" class="0x030200" link_speed="8 GT/s" link_width="16"><gpu dev="{g}" sm="80" gdr="1"/></pci>"#,
            0x11 + g
        ));
    }
    s.push_str(r#"<pci busid="0000:1f:00.0" class="0x020000" link_speed="8 GT/s" link_width="16"><nic><net name="ib0" dev="0" speed="100000" gdr="1"/></nic></pci></pci></cpu></system>"#);
    s
}

fn comm(gpus: usize, nodes: usize) -> CommTopology {
    let x = xml::parse(&machine(gpus), Schema::Topology, "machine").unwrap();
    let recs = HardwareModel::default().records(&x, nodes).unwrap();
    CommTopology::build(&recs, &TopoParams::default()).unwrap()
}

fn trees_line(c: &CommTopology, rank: usize) -> String {
    c.comm
        .log
        .iter()
        .find(|l| l.rank == rank && l.text.starts_with("Trees"))
        .map(|l| l.text.clone())
        .unwrap()
}

#[test]
fn four_nodes_of_two_gpus_match_the_reference_table() {
    let c = comm(2, 4);
    // One search channel, balanced tree with the chain 2k -> 2k+1 on node k.
    assert_eq!(c.comm.tree.n_channels, 1);
    assert_eq!(c.hosts[0].graphs.tree.pattern, 1);
    assert_eq!(c.hosts[1].graphs.tree.channel(0), &[2, 3]);
    let table = [
        " [0] 1/4/-1->0->-1 [1] 1/-1/-1->0->2",
        " [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0",
        " [0] 3/-1/-1->2->5 [1] 3/0/-1->2->6",
        " [0] -1/-1/-1->3->2 [1] 4/-1/-1->3->2",
        " [0] 5/6/-1->4->0 [1] 5/-1/-1->4->3",
        " [0] 2/-1/-1->5->4 [1] -1/-1/-1->5->4",
        " [0] 7/-1/-1->6->4 [1] 7/2/-1->6->-1",
        " [0] -1/-1/-1->7->6 [1] -1/-1/-1->7->6",
    ];
    for (r, want) in table.iter().enumerate() {
        assert_eq!(trees_line(&c, r), format!("Trees{want}"), "rank {r}");
    }
}

#[test]
fn eight_nodes_of_one_gpu_match_the_reference_examples() {
    let c = comm(1, 8);
    assert_eq!(c.hosts[0].graphs.tree.pattern, 3, "one GPU per node forces TREE");
    // Rank 4 in tree 0: 2/6/-1->4->0; rank 3 in tree 1: 5/1/-1->3->7.
    assert!(
        trees_line(&c, 4).contains(" [0] 2/6/-1->4->0 "),
        "{}",
        trees_line(&c, 4)
    );
    assert!(
        trees_line(&c, 3).ends_with(" [1] 5/1/-1->3->7"),
        "{}",
        trees_line(&c, 3)
    );
}

/// Every channel's tree over ranks: parent/children consistent across ranks, one root,
/// every rank reachable, at most 3 children.
fn check_rank_trees(c: &CommTopology) {
    let n = c.comm.nranks;
    for ch in 0..c.comm.n_channels {
        let mut roots = 0;
        for r in 0..n {
            let me = c.comm.links[r][ch];
            let downs: Vec<i32> = me.tree_down.iter().copied().filter(|&d| d >= 0).collect();
            assert!(downs.len() <= MAX_TREE_ARITY);
            for d in downs {
                assert_eq!(
                    c.comm.links[d as usize][ch].tree_up, r as i32,
                    "channel {ch}: {d}'s parent"
                );
            }
            if me.tree_up < 0 {
                roots += 1;
            } else {
                let p = c.comm.links[me.tree_up as usize][ch];
                assert!(
                    p.tree_down.contains(&(r as i32)),
                    "channel {ch}: {r} missing from its parent's children"
                );
            }
        }
        assert_eq!(roots, 1, "channel {ch}: one root");
        // Connected: n-1 edges and one root with consistent links imply a tree.
        let edges: usize = (0..n).filter(|&r| c.comm.links[r][ch].tree_up >= 0).count();
        assert_eq!(edges, n - 1);
    }
}

#[test]
fn rank_trees_are_consistent_for_1_to_64_nodes() {
    for gpus in [1, 2] {
        for nodes in 1..=64 {
            let c = comm(gpus, nodes);
            assert_eq!(c.comm.n_nodes, nodes);
            check_rank_trees(&c);
            // Rings: every channel holds every rank once.
            for ring in &c.comm.rings {
                let mut v = ring.clone();
                v.sort_unstable();
                assert_eq!(v, (0..nodes * gpus).collect::<Vec<_>>());
            }
        }
    }
}
