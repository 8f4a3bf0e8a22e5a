//! Shared code of the example programs: `ferroccl-perf`'s command line, plan,
//! result files and plots ([`perf`]), `ferroccl-info params` ([`params`]).

pub mod params;
pub mod perf;
