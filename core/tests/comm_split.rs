//! `Comm::split` (`ncclCommSplit`) with ranks as processes: 5 ranks split by
//! parity with the key reversing the order, rank 4 passing no color; each child
//! communicator all-reduces its members' parent ranks, so a rank learns both
//! its new rank and who its peers are; then the parent is still usable.

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::time::Duration;

use coll_support::{assert_all_ok, config, join, launch, role};
use ferroccl::{DataType, RedOp};

#[test]
fn split_worker() {
    let Some(r) = role("split") else { return };
    let timeout = Duration::from_secs(60);
    let parent = join(&r, timeout);
    let color = (r.rank != 4).then_some((r.rank % 2) as u32);
    let child = parent.split(color, -(r.rank as i32), config(timeout)).expect("split");
    match (color, child) {
        (None, None) => {}
        (Some(c), Some(child)) => {
            // Members of color c among ranks 0..4, in reverse order (key = -rank).
            let members: Vec<usize> = (0..4).rev().filter(|p| p % 2 == c as usize).collect();
            assert_eq!(child.nranks(), members.len());
            assert_eq!(child.rank(), members.iter().position(|&p| p == r.rank).unwrap());
            // The child's rank 0 reports its parent rank: a broadcast names the leader.
            let mut lead = (r.rank as u32).to_ne_bytes();
            child
                .broadcast_sync(&mut lead, DataType::Uint32, 0)
                .expect("child broadcast");
            assert_eq!(u32::from_ne_bytes(lead) as usize, members[0]);
            let mine = (r.rank as u32).to_ne_bytes();
            let mut sum = [0u8; 4];
            child
                .all_reduce_sync(&mine, &mut sum, DataType::Uint32, RedOp::Sum)
                .expect("child all-reduce");
            assert_eq!(u32::from_ne_bytes(sum) as usize, members.iter().sum::<usize>());
            child.destroy().expect("destroy child");
        }
        (c, got) => panic!("rank {}: color {c:?} but child {:?}", r.rank, got.map(|g| g.rank())),
    }
    // The parent still works after the split.
    let mut one = [0u8; 4];
    parent
        .all_reduce_sync(&1u32.to_ne_bytes(), &mut one, DataType::Uint32, RedOp::Sum)
        .expect("parent all-reduce");
    assert_eq!(u32::from_ne_bytes(one), 5);
    parent.destroy().expect("destroy parent");
    println!("rank {} split ok", r.rank);
}

#[test]
fn split_by_color_and_key() {
    let outs = launch(
        "split_worker",
        "split",
        5,
        &[0, 1, 2, 3, 4],
        &[],
        |_| Vec::new(),
        Duration::from_secs(120),
    );
    assert_all_ok(&outs, "split");
    assert!(outs.iter().all(|o| o.stdout.contains("split ok")));
}
