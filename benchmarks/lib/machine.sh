# Sourced by the scripts in benchmarks/ (not run): records the machine a
# figure was measured on and checks the ranks a run needs against its cores.
#
#   . "$(dirname "$0")/lib/machine.sh"
#   machine_header                # prints "# machine: ..." (stdout)
#   check_ranks 4                 # warns on stderr when 4 ranks > online cores;
#                                 # with STRICT_CORES=1 refuses (exit 3)
#
# BENCHMARKS.md keeps figures of hosts with few cores (the 2-core VM) apart
# from many-core ones; `machine_header`'s line says which a run was.

# The CPU model (x86 "model name", else arm "Processor"/"CPU part"), or "unknown".
machine_cpu_model() {
  local m
  m=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk -F': *' '/^(Processor|CPU part)/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
  echo "${m:-unknown}"
}

# Online cores (what the scheduler can use).
machine_cores() { getconf _NPROCESSORS_ONLN 2>/dev/null || nproc; }

# cpu0's frequency governor, or "unreadable" (common on VMs, no cpufreq).
machine_governor() {
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo unreadable
}

# The 1, 5 and 15-minute load averages.
machine_load() { cut -d' ' -f1-3 /proc/loadavg; }

# One comment line naming the machine, for the top of a benchmark's output.
machine_header() {
  echo "# machine: $(machine_cpu_model); $(machine_cores) cores online; governor $(machine_governor); load $(machine_load); $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
}

# check_ranks N: a run of N busy-polling ranks (each with a proxy thread) on
# fewer cores measures the scheduler, not the transport. Warns, or with
# STRICT_CORES=1 refuses.
check_ranks() {
  local n=$1 cores
  cores=$(machine_cores)
  if [ "$n" -gt "$cores" ]; then
    if [ "${STRICT_CORES:-0}" = 1 ]; then
      echo "error: $n ranks on $cores cores (STRICT_CORES=1)" >&2
      exit 3
    fi
    echo "warning: $n ranks on $cores cores: the ranks share cores, figures measure the scheduler as much as the transport" >&2
    echo "# warning: $n ranks > $cores cores"
  fi
}
