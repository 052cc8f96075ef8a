/* pingpong - how long one cache line takes to move between two CPUs, one way, in ns.
 *
 *   cc -O2 -o pingpong scripts/pingpong.c && ./pingpong [CPU_A CPU_B [ROUND_TRIPS]]
 *
 * Two processes, pinned to CPU_A and CPU_B (default 0 and 1), take turns writing one
 * shared word: each waits to see the other's value, then writes the next. Prints the
 * time of a round trip divided by two.
 *
 * Why set-scaling.sh runs it: two writers on one file share the lines they write (a
 * partition's lock line, a key's bucket and record), and each such line a set finds in
 * the other CPU's cache costs one transfer. On a VM the host may run the two vCPUs on
 * one L3 (a cheap transfer) or on two (several times dearer), and may move them
 * within seconds, so a run's scaling depends on where it ran: this says where.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
  int a = argc > 1 ? atoi(argv[1]) : 0, b = argc > 2 ? atoi(argv[2]) : 1;
  long trips = argc > 3 ? atol(argv[3]) : 100000;
  if (trips < 1) trips = 1;
  /* The line alone on its page: nothing else shares it. */
  _Atomic long *word = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (word == MAP_FAILED) { perror("mmap"); return 1; }
  atomic_store(word, 0);
  pid_t child = fork();
  if (child < 0) { perror("fork"); return 1; }
  if (child == 0) {
    /* Ready (-2) or refused (-1): the parent waits for one or the other. */
    int refused = pin(b) != 0;
    atomic_store(word, refused ? -1 : -2);
    if (refused) _exit(2);
    for (long i = 0; i < trips; i++) {
      while (atomic_load_explicit(word, memory_order_acquire) != 2 * i + 1) {}
      atomic_store_explicit(word, 2 * i + 2, memory_order_release);
    }
    _exit(0);
  }
  if (pin(a) != 0) { perror("sched_setaffinity"); kill(child, SIGKILL); return 1; }
  long ready;
  while ((ready = atomic_load(word)) == 0) {}
  if (ready == -1) { waitpid(child, NULL, 0); fprintf(stderr, "pingpong: CPU %d refused\n", b); return 1; }
  double t0 = seconds();
  for (long i = 0; i < trips; i++) {
    atomic_store_explicit(word, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(word, memory_order_acquire) != 2 * i + 2) {}
  }
  double t = seconds() - t0;
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("%.0f\n", t / (double)trips / 2 * 1e9);
  return 0;
}
