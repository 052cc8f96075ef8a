#define _GNU_SOURCE
#include "mc_shim.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int mc_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts, *tp = 0;
  if (timeout_ns > 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tp = &ts;
  }
  long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, 0, 0);
  return r == 0 ? 0 : -errno;
}

int mc_futex_wake(uint32_t *word, int count) {
  long r = syscall(SYS_futex, word, FUTEX_WAKE, count, 0, 0, 0);
  return r >= 0 ? (int)r : -errno;
}

static int ofd(int fd, int cmd, short type, int64_t offset, struct flock *out) {
  struct flock fl = {0};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = offset;
  fl.l_len = 1;
  fl.l_pid = 0;
  int r;
  do { r = fcntl(fd, cmd, &fl); } while (r != 0 && errno == EINTR);
  if (r != 0) return -errno;
  if (out) *out = fl;
  return 0;
}

int mc_ofd_lock_byte(int fd, int64_t offset) { return ofd(fd, F_OFD_SETLK, F_RDLCK, offset, 0); }
int mc_ofd_lock_byte_exclusive(int fd, int64_t offset) { return ofd(fd, F_OFD_SETLK, F_WRLCK, offset, 0); }
int mc_ofd_unlock_byte(int fd, int64_t offset) { return ofd(fd, F_OFD_SETLK, F_UNLCK, offset, 0); }
int mc_ofd_byte_is_locked(int fd, int64_t offset) {
  struct flock fl;
  int r = ofd(fd, F_OFD_GETLK, F_WRLCK, offset, &fl);
  if (r != 0) return r;
  return fl.l_type == F_UNLCK ? 0 : 1;
}

int mc_fallocate(int fd, int64_t length) {
  int r;
  do { r = fallocate(fd, 0, 0, (off_t)length); } while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : -errno;
}
