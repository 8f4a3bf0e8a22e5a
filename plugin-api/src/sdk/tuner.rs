//! The safe SDK trait for tuner plugins (`ncclTuner_v2` … `_v6`, reference §3.1).

use std::ffi::CStr;

use crate::abi;
use crate::sdk::{NetError, NetResult};

/// NCCL's cost table for one collective: `float[numAlgo][numProto]` (7 × 3 in 2.30.7).
/// Lower a cost (e.g. to 0.0) to favour a combination; write
/// [`abi::NCCL_ALGO_PROTO_IGNORE`] (-1.0) to forbid it. Entries NCCL considers
/// impossible already hold -1.0.
#[derive(Debug)]
pub struct CostTable<'a> {
    table: &'a mut [f32],
    num_algo: usize,
    num_proto: usize,
}

impl<'a> CostTable<'a> {
    /// Wraps a row-major `num_algo × num_proto` table.
    pub fn new(table: &'a mut [f32], num_algo: usize, num_proto: usize) -> NetResult<Self> {
        if table.len() != num_algo * num_proto {
            return Err(NetError::InvalidArgument(format!(
                "cost table of {} entries, expected {num_algo}x{num_proto}",
                table.len()
            )));
        }
        Ok(CostTable {
            table,
            num_algo,
            num_proto,
        })
    }
    /// Number of algorithms (rows).
    pub fn num_algo(&self) -> usize {
        self.num_algo
    }
    /// Number of protocols (columns).
    pub fn num_proto(&self) -> usize {
        self.num_proto
    }
    /// Cost of `(algo, proto)`; `None` outside the table.
    pub fn get(&self, algo: usize, proto: usize) -> Option<f32> {
        (algo < self.num_algo && proto < self.num_proto).then(|| self.table[algo * self.num_proto + proto])
    }
    /// Sets the cost of `(algo, proto)`; ignored outside the table.
    pub fn set(&mut self, algo: usize, proto: usize, cost: f32) {
        if algo < self.num_algo && proto < self.num_proto {
            self.table[algo * self.num_proto + proto] = cost;
        }
    }
}

/// What NCCL tells a tuner at `init` (per communicator).
#[derive(Debug)]
pub struct TunerInit<'a> {
    /// Communicator id (commHash); 0 for v2–v4, which do not pass it.
    pub comm_id: u64,
    /// Number of ranks.
    pub n_ranks: usize,
    /// Number of nodes.
    pub n_nodes: usize,
    /// NVLink domain info (v5+).
    pub nvl_domain: Option<abi::ncclNvlDomainInfo_v5_t>,
    /// NCCL's tuning constants, writable (v5+); NCCL reads them back after `init`.
    pub constants: Option<&'a mut abi::ncclTunerConstants_v5_t>,
}

/// A tuner plugin: one value per communicator, created by [`Tuner::init`].
/// Exported with [`export_tuner_plugin!`](crate::export_tuner_plugin).
pub trait Tuner: Sized + Send + Sync + 'static {
    /// The vtable `name`.
    const NAME: &'static CStr;

    /// Creates the per-communicator tuner. An error aborts communicator creation in NCCL.
    fn init(info: TunerInit<'_>) -> NetResult<Self>;

    /// Adjusts the cost table of one collective (`getCollInfo`). `n_channels` is
    /// pre-set to 0 (keep NCCL's choice).
    fn get_coll_info(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        num_pipe_ops: i32,
        reg_buff: bool,
        costs: &mut CostTable<'_>,
        n_channels: &mut i32,
    ) -> NetResult<()>;

    /// Adjusts the chunk size NCCL chose (`getChunkSize`, v6). Default: keep it.
    fn get_chunk_size(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        algo: i32,
        proto: i32,
        n_channels: i32,
        chunk_size: &mut usize,
    ) -> NetResult<()> {
        let _ = (coll, n_bytes, algo, proto, n_channels, chunk_size);
        Ok(())
    }

    /// Destroys the tuner (`finalize`, v2–v4 `destroy`).
    fn finalize(self) -> NetResult<()> {
        Ok(())
    }
}
