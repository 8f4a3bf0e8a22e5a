//! Shared code of the example programs: `ferroccl-perf`'s command line, plan,
//! result files and plots ([`perf`]).

pub mod perf;
