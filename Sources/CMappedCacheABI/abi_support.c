#include "mc_abi_support.h"
#include "mappedcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

uint64_t mc_abi_fork_generation_word = 1;
void *mc_abi_cache_table_word;

static pthread_mutex_t tables = PTHREAD_MUTEX_INITIALIZER;

void mc_abi_tables_lock(void) { pthread_mutex_lock(&tables); }
void mc_abi_tables_unlock(void) { pthread_mutex_unlock(&tables); }

// Only async-signal-safe work here: the child of a multithreaded process may run
// nothing else before it execs or its threads are recreated.
static void before_fork(void) { pthread_mutex_lock(&tables); }
static void after_fork_in_parent(void) { pthread_mutex_unlock(&tables); }
static void after_fork_in_child(void) {
  __atomic_store_n(&mc_abi_fork_generation_word, mc_abi_fork_generation_word + 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&tables);
}

__attribute__((constructor)) static void install_fork_handlers(void) {
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

enum { message_capacity = 1024 };
static _Thread_local char last_message[message_capacity];
static _Thread_local int last_errno;

void mc_abi_set_error(const char *message, size_t length, int errnum) {
  if (length >= message_capacity) {
    length = message_capacity - 1;
    // Back up to the start of a UTF-8 sequence, so the message stays valid UTF-8.
    while (length > 0 && (message[length] & 0xC0) == 0x80) length--;
  }
  memcpy(last_message, message, length);
  last_message[length] = 0;
  last_errno = errnum;
}

const char *mc_last_error(void) { return last_message; }

int mc_last_errno(void) { return last_errno; }

void mc_free(void *pointer) { free(pointer); }

const char *mc_status_name(int status) {
  switch (status) {
  case MC_OK: return "MC_OK";
  case MC_NOT_FOUND: return "MC_NOT_FOUND";
  case MC_NOT_STORED: return "MC_NOT_STORED";
  case MC_CLAIMED: return "MC_CLAIMED";
  case MC_BUSY: return "MC_BUSY";
  case MC_STALE: return "MC_STALE";
  case MC_E_INVALID_ARGUMENT: return "MC_E_INVALID_ARGUMENT";
  case MC_E_CLOSED: return "MC_E_CLOSED";
  case MC_E_BUFFER_TOO_SMALL: return "MC_E_BUFFER_TOO_SMALL";
  case MC_E_NO_MEMORY: return "MC_E_NO_MEMORY";
  case MC_E_EMPTY_KEY: return "MC_E_EMPTY_KEY";
  case MC_E_KEY_TOO_LARGE: return "MC_E_KEY_TOO_LARGE";
  case MC_E_INVALID_KEY: return "MC_E_INVALID_KEY";
  case MC_E_VALUE_TOO_LARGE: return "MC_E_VALUE_TOO_LARGE";
  case MC_E_INVALID_VALUE: return "MC_E_INVALID_VALUE";
  case MC_E_NOT_A_CACHE_FILE: return "MC_E_NOT_A_CACHE_FILE";
  case MC_E_INCOMPATIBLE_FORMAT: return "MC_E_INCOMPATIBLE_FORMAT";
  case MC_E_TYPE_MISMATCH: return "MC_E_TYPE_MISMATCH";
  case MC_E_DECODING_FAILED: return "MC_E_DECODING_FAILED";
  case MC_E_ENCODING_FAILED: return "MC_E_ENCODING_FAILED";
  case MC_E_CORRUPTED: return "MC_E_CORRUPTED";
  case MC_E_READ_ONLY: return "MC_E_READ_ONLY";
  case MC_E_UNSAFE_FILE: return "MC_E_UNSAFE_FILE";
  case MC_E_FILE_REPLACED: return "MC_E_FILE_REPLACED";
  case MC_E_DISK_FULL: return "MC_E_DISK_FULL";
  case MC_E_TOO_MANY_PROCESSES: return "MC_E_TOO_MANY_PROCESSES";
  case MC_E_NOT_AN_INTEGER: return "MC_E_NOT_AN_INTEGER";
  case MC_E_TIMED_OUT: return "MC_E_TIMED_OUT";
  case MC_E_COMPUTE_FAILED: return "MC_E_COMPUTE_FAILED";
  case MC_E_SYSTEM: return "MC_E_SYSTEM";
  case MC_E_FORKED: return "MC_E_FORKED";
  case MC_E_OTHER: return "MC_E_OTHER";
  default: return "MC_UNKNOWN";
  }
}

void mc_options_init(mc_options *options) {
  if (options == NULL) return;
  memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->inline_entry_size = -1;
}
