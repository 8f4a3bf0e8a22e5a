/*
 * ferroccl host-side NCCL logger shim.
 *
 * NCCL hands plugins a C-variadic `ncclDebugLogger_t`:
 *   void (*)(ncclDebugLogLevel level, unsigned long flags,
 *            const char* file, int line, const char* fmt, ...)
 * Stable Rust cannot define a C-variadic function, so this file provides one.
 * It formats the message with vsnprintf and hands the finished text to a sink
 * installed by the Rust side (core/src/plugin/logger.rs), which emits it through
 * `tracing`. Until a sink is installed, messages are dropped.
 *
 * The sink is a plain function pointer stored atomically, so no symbol of this
 * file refers to a Rust symbol (link order does not matter).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*ferroccl_log_sink_t)(int level, unsigned long flags, const char* file, int line, const char* msg);

static ferroccl_log_sink_t ferroccl_sink = NULL;

/* Installs (or, with NULL, removes) the sink. */
void ferroccl_logger_set_sink(ferroccl_log_sink_t sink) {
  __atomic_store_n(&ferroccl_sink, sink, __ATOMIC_RELEASE);
}

/* Messages up to this many bytes are formatted on the stack; longer ones on the heap. */
#define FERROCCL_LOG_STACK_BUF 1024

void ferroccl_nccl_logger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  ferroccl_log_sink_t sink = __atomic_load_n(&ferroccl_sink, __ATOMIC_ACQUIRE);
  if (sink == NULL) return;
  if (fmt == NULL) {
    sink(level, flags, file, line, "");
    return;
  }
  char stackbuf[FERROCCL_LOG_STACK_BUF];
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(stackbuf, sizeof(stackbuf), fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(ap2);
    sink(level, flags, file, line, "<ferroccl: plugin log message could not be formatted>");
    return;
  }
  if ((size_t)n < sizeof(stackbuf)) {
    va_end(ap2);
    sink(level, flags, file, line, stackbuf);
    return;
  }
  /* Longer than the stack buffer: format again into a heap buffer of the exact size. */
  char* heapbuf = (char*)malloc((size_t)n + 1);
  if (heapbuf == NULL) {
    va_end(ap2);
    sink(level, flags, file, line, stackbuf); /* truncated but NUL-terminated */
    return;
  }
  vsnprintf(heapbuf, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  sink(level, flags, file, line, heapbuf);
  free(heapbuf);
}
