//! Group calls (`ncclGroupStart` / `ncclGroupEnd`, `src/group.cc`).
//!
//! Between [`group_start`] and the matching [`group_end`], operations issued on this
//! thread are collected instead of enqueued; `group_end` hands each communicator
//! all of its operations as one unit, which the proxy progresses together — so
//! a group of sends and receives (e.g. AllToAll) cannot deadlock on ordering.
//! Groups nest; only the outermost `group_end` launches.

use std::cell::RefCell;
use std::sync::Arc;

use crate::coll::CollArgs;
use crate::error::Error;
use crate::proxy::ProxyHandle;
use crate::stream::Stream;

#[derive(Default)]
struct GroupState {
    depth: usize,
    ops: Vec<(Arc<ProxyHandle>, CollArgs, Stream)>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::default();
}

/// `ncclGroupStart`: opens (or nests) a group on this thread.
pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// `ncclGroupEnd`: closes a group; the outermost one enqueues everything collected.
///
/// Errors: [`Error::InvalidUsage`] without a matching [`group_start`]; otherwise
/// the first enqueue error (every communicator still gets its operations or
/// its error).
pub fn group_end() -> Result<(), Error> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::InvalidUsage("ncclGroupEnd without ncclGroupStart".into()));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.ops)
        } else {
            Vec::new()
        })
    })?;
    // Partition by communicator, keeping the order of first appearance.
    let mut comms: Vec<(Arc<ProxyHandle>, Vec<CollArgs>, Vec<Stream>)> = Vec::new();
    for (c, a, s) in ops {
        let i = match comms.iter().position(|(x, _, _)| Arc::ptr_eq(x, &c)) {
            Some(i) => i,
            None => {
                comms.push((c, Vec::new(), Vec::new()));
                comms.len() - 1
            }
        };
        comms[i].1.push(a);
        if !comms[i].2.iter().any(|x| x.same(&s)) {
            comms[i].2.push(s);
        }
    }
    let mut first_err = None;
    for (c, colls, streams) in comms {
        let what = describe(&colls);
        let refs: Vec<&Stream> = streams.iter().collect();
        if let Err(e) = c.submit(colls, &refs, what) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Whether a group is open on this thread.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Adds an operation to the open group; returns it back when no group is open.
pub(crate) fn try_add(comm: &Arc<ProxyHandle>, args: CollArgs, stream: &Stream) -> Option<CollArgs> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Some(args);
        }
        g.ops.push((comm.clone(), args, stream.clone()));
        None
    })
}

pub(crate) fn describe(colls: &[CollArgs]) -> String {
    match colls {
        [one] => format!("{} of {} x {}", one.kind.name(), one.count, one.dtype),
        _ => format!("group of {} operations", colls.len()),
    }
}
