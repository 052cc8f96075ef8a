// A fleet of processes on one cache file, all with the default options: the test of
// "every pre-fork fleet works with defaults" (each process takes one slot of the
// process table, however many handles it opens on the file). CABITests builds it with
// cc against libmappedcache.so.
//
//   fleet spawn PATH N     starts N copies of `fleet worker` at once (fork and exec), waits
//                          for all, then reads every worker's key and verifies the file
//   fleet prefork PATH N   opens PATH, then forks N children (no exec) that each write
//                          through the inherited handle and through one they open, as the
//                          workers of a pre-fork server do, then the same checks
//   fleet worker PATH I    opens PATH twice, writes key wI through one handle, reads it
//                          back through the other, exits 0 when all went right
//
// Every worker keeps its handles open until all N have written (it says so on the ready
// pipe, fd 3, and waits for the go pipe, fd 4, to close), so that all N hold their
// place in the process table at the same time.
//
// The last line is "fleet: N processes, F failed, P problems"; the exit status is 0
// only when both counts are 0.
#define _GNU_SOURCE
#include "mappedcache.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// What worker `i` writes: its key, its value (a little more than the key, so that a value
// read from another key's record cannot pass).
static void key_and_value(long i, char *key, size_t key_size, char *value, size_t value_size) {
  snprintf(key, key_size, "w%ld", i);
  snprintf(value, value_size, "worker %ld of the fleet", i);
}

// Sets worker `i`'s key through `writer` and reads it back through `reader`.
static int write_and_read(mc_cache *writer, mc_cache *reader, long i) {
  char key[32], value[64], got[64];
  key_and_value(i, key, sizeof key, value, sizeof value);
  if (mc_set(writer, key, strlen(key), value, strlen(value), 0) != MC_OK) {
    fprintf(stderr, "worker %ld: set: %s\n", i, mc_last_error());
    return 1;
  }
  size_t length = 0;
  if (mc_get(reader, key, strlen(key), got, sizeof got, &length) != MC_OK || length != strlen(value) ||
      memcmp(got, value, length) != 0) {
    fprintf(stderr, "worker %ld: read back: %s\n", i, mc_last_error());
    return 1;
  }
  return 0;
}

enum { READY_FD = 3, GO_FD = 4 };

// Says "ready" (one byte), then waits until the launcher closes the go pipe.
static void wait_for_the_fleet(int ready, int go) {
  char byte = 'r';
  if (write(ready, &byte, 1) != 1) perror("write ready");
  close(ready);
  while (read(go, &byte, 1) > 0) {
  }
  close(go);
}

static int worker(const char *path, long i, int ready, int go) {
  mc_cache *first = NULL, *second = NULL;
  int failed = 1;
  if (mc_open(path, NULL, &first) != MC_OK || mc_open(path, NULL, &second) != MC_OK) {
    fprintf(stderr, "worker %ld: open: %s\n", i, mc_last_error());
  } else {
    failed = write_and_read(first, second, i);
  }
  wait_for_the_fleet(ready, go);
  mc_close(first);
  mc_close(second);
  return failed;
}

// The launcher's side of the barrier: the pipes' ends it keeps are ready[0] and go[1].
static int ready_pipe[2], go_pipe[2];

// In a child: the barrier's ends at READY_FD and GO_FD, the launcher's ends closed.
static void child_ends(void) {
  close(ready_pipe[0]);
  close(go_pipe[1]);
  if (dup2(ready_pipe[1], READY_FD) < 0 || dup2(go_pipe[0], GO_FD) < 0) _exit(126);
}

// Once `started` children run: waits until each said ready (or died), then lets all go.
static void release_the_fleet(long started) {
  close(ready_pipe[1]);
  close(go_pipe[0]);
  char byte;
  for (long k = 0; k < started && read(ready_pipe[0], &byte, 1) == 1; k++) {
  }
  close(go_pipe[1]);
  close(ready_pipe[0]);
}

// Waits for `n` children; returns how many did not exit 0.
static long wait_all(long n) {
  long failed = 0;
  for (long k = 0; k < n; k++) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  return failed;
}

static long spawn(const char *self, const char *path, long n) {
  long started = 0;
  for (long i = 0; i < n; i++) {
    char index[32];
    snprintf(index, sizeof index, "%ld", i);
    pid_t pid = fork();
    if (pid == 0) {
      child_ends();
      execl("/proc/self/exe", self, "worker", path, index, (char *)NULL);
      _exit(127);
    }
    if (pid < 0) {
      perror("fork");
      break;
    }
    started++;
  }
  release_the_fleet(started);
  return wait_all(started) + (n - started);
}

static long prefork(const char *path, long n) {
  mc_cache *parent = NULL;
  if (mc_open(path, NULL, &parent) != MC_OK) {
    fprintf(stderr, "prefork: open: %s\n", mc_last_error());
    return n;
  }
  long started = 0;
  for (long i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      child_ends();
      mc_after_fork_child();
      mc_cache *own = NULL;
      int failed = 1;
      if (mc_open(path, NULL, &own) != MC_OK) {
        fprintf(stderr, "child %ld: open: %s\n", i, mc_last_error());
      } else {
        failed = write_and_read(parent, own, i);
      }
      wait_for_the_fleet(READY_FD, GO_FD);
      _exit(failed);
    }
    if (pid < 0) {
      perror("fork");
      break;
    }
    started++;
  }
  release_the_fleet(started);
  long failed = wait_all(started) + (n - started);
  mc_close(parent);
  return failed;
}

// Every worker's key holds its value, and the file verifies clean. Returns the number of
// problems (missing or wrong keys, and verify's).
static long check(const char *path, long n) {
  mc_cache *c = NULL;
  if (mc_open(path, NULL, &c) != MC_OK) {
    fprintf(stderr, "check: open: %s\n", mc_last_error());
    return 1;
  }
  long problems = 0;
  for (long i = 0; i < n; i++) {
    char key[32], value[64], got[64];
    key_and_value(i, key, sizeof key, value, sizeof value);
    size_t length = 0;
    if (mc_get(c, key, strlen(key), got, sizeof got, &length) != MC_OK || length != strlen(value) ||
        memcmp(got, value, length) != 0) {
      fprintf(stderr, "check: %s is missing or wrong\n", key);
      problems++;
    }
  }
  size_t found = 0;
  if (mc_verify(c, 0, &found) != MC_OK || found != 0) {
    fprintf(stderr, "check: verify found %zu problems: %s\n", found, mc_last_error());
    problems += found ? (long)found : 1;
  }
  mc_close(c);
  return problems;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: fleet spawn|prefork|worker PATH N\n");
    return 64;
  }
  const char *mode = argv[1], *path = argv[2];
  long n = strtol(argv[3], NULL, 10);
  if (strcmp(mode, "worker") == 0) return worker(path, n, READY_FD, GO_FD);
  if (pipe(ready_pipe) != 0 || pipe(go_pipe) != 0) {
    perror("pipe");
    return 1;
  }
  long failed;
  if (strcmp(mode, "spawn") == 0) {
    failed = spawn(argv[0], path, n);
  } else if (strcmp(mode, "prefork") == 0) {
    failed = prefork(path, n);
  } else {
    fprintf(stderr, "fleet: unknown mode %s\n", mode);
    return 64;
  }
  long problems = check(path, n);
  printf("fleet: %ld processes, %ld failed, %ld problems\n", n, failed, problems);
  return failed == 0 && problems == 0 ? 0 : 1;
}
