/*
 * mappedcache.h: the C ABI of MappedCache (libmappedcache.so).
 *
 * MappedCache is a cache that the processes of one Linux host share through one
 * memory-mapped file. Reads take no lock and make no system call (a seqlock per slot:
 * copy, check, retry); writes are serialised by a lock word in the file that survives
 * any writer being killed, even mid-write. This header opens the same files that
 * Swift's SharedCache opens, so C, Python (bindings/python), Ruby, PHP or Node
 * processes share one cache with Swift processes: a value one of them stores, every
 * other reads.
 *
 *   mc_cache *c;
 *   if (mc_open("/dev/shm/app.mcache", NULL, &c) != MC_OK) { puts(mc_last_error()); return 1; }
 *   mc_set(c, "greeting", 8, "hello", 5, 60.0);          // expires in 60 s (0: never)
 *   char buf[256]; size_t n;
 *   if (mc_get(c, "greeting", 8, buf, sizeof buf, &n) == MC_OK) printf("%.*s\n", (int)n, buf);
 *   mc_close(c);
 *
 * Conventions (every function):
 *
 *  - Return values. Functions return an int status: MC_OK (0), a positive outcome
 *    that is not an error (MC_NOT_FOUND, MC_NOT_STORED, MC_CLAIMED, MC_BUSY,
 *    MC_STALE), or a negative error (MC_E_*). After an error, mc_last_error() gives a
 *    message naming the problem and what to do (the message of the Swift CacheError
 *    behind it), and mc_last_errno() the errno of a failed system call.
 *  - Bad arguments never crash: a NULL pointer where one is required, a key that is
 *    empty, longer than the cache's key limit or not UTF-8, a closed or unknown handle,
 *    a negative or NaN time: each is an error code. Handles are checked like file
 *    descriptors: after mc_close, the old handle gives MC_E_CLOSED (a handle value is
 *    never reused for another cache in the life of the process, up to 2^28 closes of
 *    one table slot).
 *  - Keys are bytes that must be valid UTF-8 (as Swift's String keys are), 1 byte up to
 *    the cache's key limit (250 by default). Values are bytes; a cache of strings
 *    accepts only UTF-8 values and a cache of int64 only 8-byte (little-endian) values,
 *    so that Swift readers of the file decode what C writers store.
 *  - Time-to-live arguments are seconds (double): > 0 expires that long from now; 0
 *    means never (memcached's convention); negative or NaN is MC_E_INVALID_ARGUMENT.
 *    Expiry is stored as wall-clock time, shared by every process and restart.
 *  - Thread safety: every function may be called from any thread, on one handle or
 *    many, at once; mc_close (or mc_publish / mc_abandon for a claim) must not race
 *    with other calls on the same handle, as with close(2) on a descriptor.
 *  - fork(2). A handle opened before fork() works in the child: its first call there
 *    opens the file again for the child (its own registration and write-lock token;
 *    the parent's stay the parent's). The library's pthread_atfork handler marks
 *    handles as inherited; call mc_after_fork_child() early in a child to also close
 *    the inherited descriptors at once, so that the parent's exit is seen by other
 *    processes at once (the Python package does). A claim taken before fork stays the
 *    parent's: in the child, mc_publish and mc_abandon on it return MC_E_FORKED and
 *    leave the parent's claim alone. Do not fork while another thread is inside a
 *    call of this library (the child would inherit the locks that thread held).
 *
 * Versioning: MC_ABI_VERSION changes only when a function or structure in this header
 * changes incompatibly; mc_abi_version() is the ABI of the loaded library. Structures
 * passed in begin with struct_size (set by their *_init function or to sizeof), so
 * fields can be added at their end without breaking older callers.
 */
#ifndef MAPPEDCACHE_H
#define MAPPEDCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI this header describes. */
#define MC_ABI_VERSION 1

/* ------------------------------------------------------------------------------------ */
/* Status codes                                                                          */

/** Success. */
#define MC_OK 0
/** The key has no live entry (missing or expired). Not an error. */
#define MC_NOT_FOUND 1
/** A conditional write did not store: mc_add found the key present, mc_replace found it
 *  absent, mc_cas found another version (or no entry). Not an error. */
#define MC_NOT_STORED 2
/** mc_get_or_claim: this caller now computes the value; call mc_publish or mc_abandon. */
#define MC_CLAIMED 3
/** mc_get_or_claim with no wait: another process (or thread) is computing the key now. */
#define MC_BUSY 4
/** mc_get_or_claim with MC_CLAIM_SERVE_STALE: another process is recomputing the key, and its
 *  expired value was copied instead. */
#define MC_STALE 5

/** An argument is NULL, out of range or inconsistent (the message says which). */
#define MC_E_INVALID_ARGUMENT (-1)
/** The handle was closed, or never was a handle of this library. */
#define MC_E_CLOSED (-2)
/** The value does not fit the caller's buffer; *len holds its length (nothing copied). */
#define MC_E_BUFFER_TOO_SMALL (-3)
/** Memory could not be allocated. */
#define MC_E_NO_MEMORY (-4)
/** The key is empty. */
#define MC_E_EMPTY_KEY (-5)
/** The key is longer than the cache's key limit (mc_info's max_key_size). */
#define MC_E_KEY_TOO_LARGE (-6)
/** The key is not valid UTF-8. */
#define MC_E_INVALID_KEY (-7)
/** The value is larger than the cache's value limit (mc_info's max_value_size). */
#define MC_E_VALUE_TOO_LARGE (-8)
/** The value is not one of the cache's type (not UTF-8 for a cache of strings, not 8
 *  bytes for a cache of int64). */
#define MC_E_INVALID_VALUE (-9)
/** The file exists but is not a MappedCache file; it was left untouched. */
#define MC_E_NOT_A_CACHE_FILE (-10)
/** A MappedCache file of another format version; it was left untouched. */
#define MC_E_INCOMPATIBLE_FORMAT (-11)
/** The file holds values of another type than options.value_type asked for, or of a
 *  type this ABI does not open (a Swift Codable type). */
#define MC_E_TYPE_MISMATCH (-12)
/** A stored value could not be decoded as the cache's type. */
#define MC_E_DECODING_FAILED (-13)
/** A value could not be encoded. */
#define MC_E_ENCODING_FAILED (-14)
/** The file is damaged beyond automatic repair (mapped-cache verify --repair). */
#define MC_E_CORRUPTED (-15)
/** A write on a handle opened read-only (or a file this user may not write). */
#define MC_E_READ_ONLY (-16)
/** The file was refused for safety (a symlink, another owner, writable by others). */
#define MC_E_UNSAFE_FILE (-17)
/** The path now names another file than the one this handle has mapped. */
#define MC_E_FILE_REPLACED (-18)
/** No space to reserve the file's blocks. */
#define MC_E_DISK_FULL (-19)
/** Every process slot of the file is held by a live process. */
#define MC_E_TOO_MANY_PROCESSES (-20)
/** mc_incr: the stored value is not an integer. */
#define MC_E_NOT_AN_INTEGER (-21)
/** A wait ran out of time. */
#define MC_E_TIMED_OUT (-22)
/** A recent compute of the key failed and the failure is cached (negative caching by a
 *  Swift process); it is served until it expires. */
#define MC_E_COMPUTE_FAILED (-23)
/** A system call failed: mc_last_errno() gives its errno. */
#define MC_E_SYSTEM (-24)
/** A claim taken by the parent before fork() was used in the child. */
#define MC_E_FORKED (-25)
/** An error this ABI has no code for (the message says what). */
#define MC_E_OTHER (-26)

/* ------------------------------------------------------------------------------------ */
/* Versions and errors                                                                   */

/** The ABI of the loaded library (MC_ABI_VERSION when it matches this header). */
uint32_t mc_abi_version(void);
/** The library's version, e.g. "0.8.0" (a static string). */
const char *mc_version(void);
/** The file format version this library creates and opens (the only one). */
int mc_file_format_version(void);

/** The message of the last error on this thread (a thread-local buffer valid until the
 *  next failing call on this thread), or "" when no call on this thread failed. */
const char *mc_last_error(void);
/** The errno of the last MC_E_SYSTEM error on this thread (0 otherwise). */
int mc_last_errno(void);
/** The name of a status code ("MC_OK", "MC_E_KEY_TOO_LARGE", ...; a static string, or
 *  "MC_UNKNOWN" for a number that is no status). */
const char *mc_status_name(int status);

/* ------------------------------------------------------------------------------------ */
/* Opening and closing                                                                   */

/** An open cache. Opaque: a checked handle, not a pointer to dereference. */
typedef struct mc_cache mc_cache;

/** Open read-only (writes then return MC_E_READ_ONLY). */
#define MC_OPEN_READ_ONLY 0x01u
/** Never create the file: a missing file is MC_E_SYSTEM (ENOENT). */
#define MC_OPEN_NO_CREATE 0x02u
/** Check each value's checksum on every read (a mismatch reads as a miss). */
#define MC_OPEN_VERIFY_CHECKSUMS 0x04u
/** Accept a file owned by another user. */
#define MC_OPEN_ALLOW_OTHER_OWNER 0x08u
/** Accept a file that group or others can write. */
#define MC_OPEN_ALLOW_GROUP_OR_WORLD_WRITABLE 0x10u
/** Writers exclude each other with flock(2) instead of the lock word in the file. */
#define MC_OPEN_FLOCK 0x20u

/** How to open or create a cache. Fill it with mc_options_init, then change fields.
 *  Creation parameters apply only when the file is created; an existing file keeps
 *  its own. */
typedef struct mc_options {
  /** sizeof(mc_options), set by mc_options_init. */
  size_t struct_size;
  /** File size in bytes for a new file, 1 MiB to 64 TiB (0: 64 MiB). */
  uint64_t capacity;
  /** Longest key, 1 to 4096 bytes (0: 250). */
  uint32_t max_key_size;
  /** Largest value in bytes (0: 1 MiB, lowered for small caches). */
  uint32_t max_value_size;
  /** Expected average key+value size: a hint for the index's first size, which then
   *  follows the entries (0: 320). */
  uint32_t average_entry_size;
  /** Ignored since format 5, where every entry is a record in a log (kept so that code
   *  written for earlier versions still compiles); -1, or 0 to 208. */
  int32_t inline_entry_size;
  /** Most processes that can write the file at once, 1 to 16383 (0: 8192 for a capacity
   *  of 32 MiB or more, 256 below). A process's handles on one file share one entry. */
  uint32_t max_processes;
  /** Permission bits of a new file (0: 0600). */
  uint32_t mode;
  /** MC_OPEN_* flags. */
  uint32_t flags;
  /** The value type: "bytes", "string", "int64" or "python" (bindings/python's tagged
   *  values). A file of another type is MC_E_TYPE_MISMATCH; a file created untyped opens
   *  as any type. NULL: the file's own type when it exists (any of the four), and
   *  create_value_type when the file is created. */
  const char *value_type;
  /** With value_type NULL, the type of a file this call creates (NULL: "bytes"). */
  const char *create_value_type;
  /** A group to share the file with (see README, "Sharing a cache between users"), or
   *  NULL. */
  const char *shared_group;
  /** Partitions of a new file, each with its own write lock, index and logs (1 to
   *  1048576; 0: chosen from the capacity, the largest value and the machine's cores).
   *  More let more writers run at once; fewer, larger ones hold larger values. */
  uint32_t partition_count;
} mc_options;

/** Sets *options to the defaults (every number 0, inline_entry_size -1, no flags). */
void mc_options_init(mc_options *options);

/** Opens the cache at path, creating it when missing (unless MC_OPEN_NO_CREATE).
 *  options may be NULL (the defaults). On MC_OK, *cache is the new handle. Open one
 *  handle per process and file and share it between threads. */
int mc_open(const char *path, const mc_options *options, mc_cache **cache);

/** Closes the handle (unmapping the file when no claim of it is pending). The handle
 *  is invalid afterwards: every call with it returns MC_E_CLOSED. */
int mc_close(mc_cache *cache);

/** What mc_info reports. */
typedef struct mc_info {
  /** sizeof(mc_info): set it before the call (fields past it are not written). */
  size_t struct_size;
  /** The file's size in bytes. */
  uint64_t capacity;
  /** The longest key, in bytes. */
  uint32_t max_key_size;
  /** The largest value, in bytes. */
  uint32_t max_value_size;
  /** 1 when this handle can write. */
  int32_t writable;
  /** The value type the handle reads and writes ("bytes", "string", "int64", "python"). */
  char value_type[32];
  /** Partitions of the file (each with its own write lock, index and logs). */
  uint32_t partition_count;
} mc_info;

/** The cache's fixed parameters. */
int mc_info_get(mc_cache *cache, mc_info *info);

/** Drops what a child of fork() inherited: every handle's descriptor and mapping (each
 *  handle opens the file again on its next call) and every claim (left held by the
 *  parent). Call it in the child only, before other threads start; a no-op in a
 *  process that did not fork. Returns MC_OK. */
int mc_after_fork_child(void);

/* ------------------------------------------------------------------------------------ */
/* Reading                                                                               */

/** Copies the value of key into buffer (capacity bytes) and sets *length to its length.
 *  MC_OK; MC_NOT_FOUND when missing or expired; MC_E_BUFFER_TOO_SMALL when the value is
 *  longer than capacity (*length says how long; nothing is copied; the value may have
 *  changed by the next call). Lock-free: no lock, no system call. buffer may be NULL
 *  when capacity is 0 (asks for the length). */
int mc_get(mc_cache *cache, const void *key, size_t key_length, void *buffer, size_t capacity, size_t *length);

/** mc_get into memory it allocates: *value (free it with mc_free) and *length. *value
 *  is NULL when the status is not MC_OK. */
int mc_get_alloc(mc_cache *cache, const void *key, size_t key_length, void **value, size_t *length);

/** Frees memory that mc_get_alloc returned (NULL is fine). */
void mc_free(void *pointer);

/** mc_get that also gives the entry's version, for mc_cas. */
int mc_gets(mc_cache *cache, const void *key, size_t key_length, void *buffer, size_t capacity, size_t *length,
            uint64_t *version);

/** MC_OK when key has a live entry, MC_NOT_FOUND otherwise (not counted as a hit or
 *  miss). */
int mc_exists(mc_cache *cache, const void *key, size_t key_length);

/** Seconds until key expires: *seconds > 0, or INFINITY when it never expires.
 *  MC_NOT_FOUND when missing or expired. */
int mc_ttl(mc_cache *cache, const void *key, size_t key_length, double *seconds);

/** The length mc_get_many reports for a key with no live entry. */
#define MC_MISSING (-1)

/** Reads count keys at once: the value of keys[j] (key_lengths[j] bytes) is copied into
 *  buffers[j] (capacities[j] bytes) and lengths[j] is set to its length, or MC_MISSING.
 *  A value longer than its buffer is not copied: lengths[j] > capacities[j] says how
 *  long (read it again). Faster per key than single reads on a large cache (every key's
 *  slot is prefetched before any is read). *found (may be NULL) counts the keys present.
 *  A bad key fails the whole call before anything is read. */
int mc_get_many(mc_cache *cache, size_t count, const void *const *keys, const size_t *key_lengths,
                void *const *buffers, const size_t *capacities, int64_t *lengths, size_t *found);

/* ------------------------------------------------------------------------------------ */
/* Writing (each takes the file's write lock for the one operation)                      */

/** Stores value under key, expiring after ttl seconds (0: never). */
int mc_set(mc_cache *cache, const void *key, size_t key_length, const void *value, size_t value_length,
           double ttl);

/** Stores only if key has no live entry: MC_OK, or MC_NOT_STORED when it had one. Of
 *  several processes adding one key at once, exactly one stores. */
int mc_add(mc_cache *cache, const void *key, size_t key_length, const void *value, size_t value_length,
           double ttl);

/** Stores only if key has a live entry: MC_OK, or MC_NOT_STORED when it had none. */
int mc_replace(mc_cache *cache, const void *key, size_t key_length, const void *value, size_t value_length,
               double ttl);

/** Compare-and-swap: stores only if the entry's version is still version (from
 *  mc_gets): MC_OK, or MC_NOT_STORED when another write came first or the entry is
 *  gone. */
int mc_cas(mc_cache *cache, const void *key, size_t key_length, const void *value, size_t value_length,
           double ttl, uint64_t version);

/** Removes key: MC_OK, or MC_NOT_FOUND when it was not present. */
int mc_delete(mc_cache *cache, const void *key, size_t key_length);

/** Changes when key expires (ttl seconds from now; 0: never), keeping its value: MC_OK,
 *  or MC_NOT_FOUND. */
int mc_touch(mc_cache *cache, const void *key, size_t key_length, double ttl);

/** Adds delta to the integer under key and sets *result (may be NULL) to the new
 *  value, atomically across every process. A missing or expired key starts from
 *  initial. In a cache of int64 the value is Swift's SharedCache<Int> counter (8 bytes,
 *  little-endian, changed in place); in caches of bytes or strings it is ASCII decimal
 *  (memcached's and Redis's INCR format, e.g. "42" or "-7"). ttl > 0 sets the expiry;
 *  ttl 0 keeps an existing counter's expiry (a new one never expires).
 *  MC_E_NOT_AN_INTEGER when the value is not an integer; MC_E_INVALID_ARGUMENT on
 *  overflow (both leave the entry as it was). Use a negative delta to decrement. */
int mc_incr(mc_cache *cache, const void *key, size_t key_length, int64_t delta, int64_t initial, double ttl,
            int64_t *result);

/** Stores count entries under one hold of the write lock, all expiring after ttl
 *  seconds (0: never): values[j] (value_lengths[j] bytes) under keys[j]. Every entry is
 *  checked first: a bad one fails the call before anything is stored. A key given twice
 *  keeps its last value. */
int mc_set_many(mc_cache *cache, size_t count, const void *const *keys, const size_t *key_lengths,
                const void *const *values, const size_t *value_lengths, double ttl);

/** Removes count keys under one hold of the write lock; *removed (may be NULL) counts
 *  those that were present. Every key is checked first. */
int mc_delete_many(mc_cache *cache, size_t count, const void *const *keys, const size_t *key_lengths,
                   size_t *removed);

/** Removes every entry, in every process's view. */
int mc_clear(mc_cache *cache);

/** Removes every expired entry now; *removed (may be NULL) counts them. */
int mc_sweep(mc_cache *cache, size_t *removed);

/** Sets the entry count limit and the key+value byte limit stored in the file (every
 *  process honours them; 0: none; a negative number leaves that limit as it is),
 *  evicting down to them at once. */
int mc_set_limits(mc_cache *cache, int64_t count_limit, int64_t cost_limit);

/* ------------------------------------------------------------------------------------ */
/* Iteration                                                                             */

/** Called by mc_foreach for each live entry: its key, its value (NULL and 0 with
 *  MC_FOREACH_KEYS_ONLY) and the seconds it has left (INFINITY: never expires). The
 *  pointers are valid during the call only. Return 0 to go on, anything else to stop. */
typedef int (*mc_visit_fn)(void *context, const void *key, size_t key_length, const void *value,
                           size_t value_length, double ttl);

/** Visit keys only (values are not copied). */
#define MC_FOREACH_KEYS_ONLY 0x01u

/** Calls visit for each live entry, without taking the write lock (writers in other
 *  processes go on): each entry is copied whole under its slot's version counter;
 *  entries written or moved meanwhile may be missed, none is visited twice. visit may
 *  call other functions of this library, including writes. */
int mc_foreach(mc_cache *cache, uint32_t flags, mc_visit_fn visit, void *context);

/* ------------------------------------------------------------------------------------ */
/* Statistics and checks                                                                 */

/** The cache's counters, summed over every process that has used the file (Swift's
 *  CacheStatistics). */
typedef struct mc_stats {
  /** sizeof(mc_stats): set it before the call (fields past it are not written). */
  size_t struct_size;
  int64_t entries;        /**< entries present (some may have expired, not yet reclaimed) */
  int64_t live_bytes;     /**< key and value bytes of those entries */
  int64_t capacity;       /**< the file's size */
  int64_t hits;           /**< reads that found a live entry */
  int64_t misses;         /**< reads that found none */
  int64_t busy_misses;    /**< misses only because a bucket stayed mid-write past the wait */
  int64_t sets;           /**< entries stored */
  int64_t evictions;      /**< entries removed to make room */
  int64_t expirations;    /**< expired entries reclaimed */
  int64_t recoveries;     /**< repairs after a writer died mid-change */
  int64_t removals;       /**< entries removed by request */
  int64_t lock_takeovers; /**< times a writer took the lock over from a dead holder */
  int64_t slot_count;     /**< slots of the index now, every partition's (it grows and shrinks) */
  int64_t max_entries;    /**< entries the index holds now before it grows */
  int64_t count_limit;    /**< the entry count limit stored in the file (0: none) */
  int64_t cost_limit;     /**< the key+value byte limit stored in the file (0: none) */
  int64_t partition_count; /**< partitions of the file */
  int64_t index_splits;   /**< groups added to the indexes as entries grew */
  int64_t index_merges;   /**< groups removed as entries shrank */
} mc_stats;

/** Fills *stats (set stats->struct_size first). Lock-free. */
int mc_stats_get(mc_cache *cache, mc_stats *stats);

/** Checks every invariant of the file (every slot, record and checksum); with repair
 *  non-zero, drops what cannot be trusted. *problems (may be NULL) is set to the number
 *  of problems found. MC_OK when the file is sound (or was repaired). MC_E_CORRUPTED
 *  when problems remain (the message lists the first ones). */
int mc_verify(mc_cache *cache, int repair, size_t *problems);

/** Grows the file to `capacity` bytes (rounded down to whole partitions) while every
 *  other process keeps using it, and sets *grown (may be NULL) to the capacity after.
 *  Nothing stored is lost; no process has to reopen. MC_E_DISK_FULL when the file
 *  system has no room (the file is left as it was); MC_E_INVALID_ARGUMENT for a
 *  capacity below the current one or past the most the file may grow to (fixed at
 *  creation); MC_E_READ_ONLY. */
int mc_grow(mc_cache *cache, int64_t capacity, int64_t *grown);

/** Stores a growth policy in the file (every process's writes apply it): the cache grows
 *  by `factor` (1.1 to 16) when, since the last growth, at least `ghost_hit_rate` (0.001
 *  to 1) of the new keys stored were evicted recently and came back, at most every
 *  `min_interval_s` seconds (0.1 to 10^6) and after `min_inserts` new keys (1 to 10^9),
 *  never past the most capacity or the file system's free space. `ghost_hit_rate` 0
 *  removes the policy. MC_E_INVALID_ARGUMENT for a value out of range; MC_E_READ_ONLY. */
int mc_set_growth_policy(mc_cache *cache, double ghost_hit_rate, double factor, double min_interval_s,
                         int64_t min_inserts);

/* ------------------------------------------------------------------------------------ */
/* Get-or-compute, once across every process                                            */

/** A claim to compute one key (opaque, checked like mc_cache). */
typedef struct mc_claim mc_claim;

/** mc_get_or_claim: while another process recomputes an expired entry still present, copy
 *  that value and return MC_STALE instead of waiting. */
#define MC_CLAIM_SERVE_STALE 0x01u

/** The first step of get-or-compute. When key has a live value, copies it (as mc_get:
 *  MC_OK, or MC_E_BUFFER_TOO_SMALL with *length) and sets *claim to NULL. When it is
 *  missing, claims the key (the same claim Swift's object(forKey:orCompute:) takes, so
 *  one caller computes across Swift and C processes alike) and returns MC_CLAIMED with
 *  *claim set: compute the value, then mc_publish it (or mc_abandon). When another
 *  process holds the claim, waits up to wait_seconds (polling with backoff, 1 ms to 20
 *  ms) for its value: 0 returns MC_BUSY at once (poll again later, e.g. from an event
 *  loop); when the wait runs out, returns MC_CLAIMED with a claim that is not exclusive
 *  (compute here as well, as Swift does). A claimer that dies, even by SIGKILL, releases
 *  its claim at once. MC_E_COMPUTE_FAILED while a failure cached by a Swift caller
 *  lasts. On a read-only handle, MC_CLAIMED with a claim whose mc_publish stores
 *  nothing. */
int mc_get_or_claim(mc_cache *cache, const void *key, size_t key_length, double wait_seconds, uint32_t flags,
             void *buffer, size_t capacity, size_t *length, mc_claim **claim);

/** Stores the computed value under the claim's key (expiring after ttl seconds; 0:
 *  never) and releases the claim; waiters in every process then read the value. The
 *  claim handle is invalid afterwards, whatever the status. */
int mc_publish(mc_claim *claim, const void *value, size_t value_length, double ttl);

/** Releases the claim without storing (the compute failed): a waiting process claims
 *  the key next. The claim handle is invalid afterwards. */
int mc_abandon(mc_claim *claim);

/** MC_OK when some process (or thread) is computing key now through a claim,
 *  MC_NOT_FOUND otherwise. */
int mc_is_computing(mc_cache *cache, const void *key, size_t key_length);

#ifdef __cplusplus
}
#endif

#endif /* MAPPEDCACHE_H */
