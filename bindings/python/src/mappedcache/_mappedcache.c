/*
 * mappedcache._mappedcache: the Python type over libmappedcache's C ABI (mappedcache.h).
 *
 * A C extension rather than ctypes because a get must cost about a microsecond from
 * Python: a method call here is one vectorcall, the key's UTF-8 is the str's own cached
 * bytes, and the value is copied from the file into a stack buffer, then into the
 * returned object. The GIL is held across every call into the library: its calls do not
 * wait, except mc_get_or_claim with a wait, which this module never asks for (the
 * Python side waits in time.sleep). So no thread of the process is inside the library
 * when another forks (os.fork, multiprocessing), and the child inherits no lock held
 * by it.
 *
 * Values by the cache's value type:
 *   bytes   bytes-like in, bytes out        (Swift [UInt8], Data)
 *   string  str in, str out                  (Swift String)
 *   int64   int in, int out (8 bytes, LE)    (Swift Int)
 *   python  a tag byte, then the value: B bytes, S str (UTF-8), I int (ASCII decimal,
 *           the form mc_incr changes), F float (8 bytes LE), P pickle (with pickle=True);
 *           J (JSON text, the Node addon's other values) is read too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "mappedcache.h"

enum value_type { VT_BYTES, VT_STRING, VT_INT64, VT_PYTHON };
static const char *const value_type_names[] = {"bytes", "string", "int64", "python"};

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                              */

static PyObject *CacheError, *ClosedError, *InvalidKeyError, *InvalidValueError, *TypeMismatchError,
    *NotACacheError, *CorruptedError, *ReadOnlyError, *UnsafeFileError, *NotAnIntegerError, *ComputeFailedError,
    *ForkedClaimError, *CacheOSError, *CacheTimeoutError, *DecodingError;

/* Raises the exception for a status of the C ABI, with the library's message. */
static PyObject *raise_status(int status) {
  PyObject *type = CacheError;
  switch (status) {
  case MC_E_CLOSED: type = ClosedError; break;
  case MC_E_INVALID_ARGUMENT: type = PyExc_ValueError; break;
  case MC_E_EMPTY_KEY:
  case MC_E_KEY_TOO_LARGE:
  case MC_E_INVALID_KEY: type = InvalidKeyError; break;
  case MC_E_VALUE_TOO_LARGE:
  case MC_E_INVALID_VALUE: type = InvalidValueError; break;
  case MC_E_TYPE_MISMATCH: type = TypeMismatchError; break;
  case MC_E_NOT_A_CACHE_FILE:
  case MC_E_INCOMPATIBLE_FORMAT: type = NotACacheError; break;
  case MC_E_CORRUPTED: type = CorruptedError; break;
  case MC_E_READ_ONLY: type = ReadOnlyError; break;
  case MC_E_UNSAFE_FILE: type = UnsafeFileError; break;
  case MC_E_NOT_AN_INTEGER: type = NotAnIntegerError; break;
  case MC_E_COMPUTE_FAILED: type = ComputeFailedError; break;
  case MC_E_FORKED: type = ForkedClaimError; break;
  case MC_E_TIMED_OUT: type = CacheTimeoutError; break;
  case MC_E_DECODING_FAILED: type = DecodingError; break;
  case MC_E_NO_MEMORY: return PyErr_NoMemory();
  case MC_E_SYSTEM: {
    PyObject *args = Py_BuildValue("(is)", mc_last_errno(), mc_last_error());
    if (args != NULL) {
      PyErr_SetObject(CacheOSError, args);
      Py_DECREF(args);
    }
    return NULL;
  }
  default: break;
  }
  PyErr_SetString(type, mc_last_error());
  return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Arguments                                                                           */

/* Fills out[0..n) from positional arguments, then keywords named names[i]; the first
 * `required` must be given. Missing optional ones are left as they are (NULL). */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int required, int n, PyObject **out) {
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n, nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
  if (kwnames != NULL) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nk; j++) {
      PyObject *name = PyTuple_GET_ITEM(kwnames, j);
      int i = 0;
      while (i < n && PyUnicode_CompareWithASCIIString(name, names[i]) != 0) i++;
      if (i == n) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, name);
        return -1;
      }
      if (out[i] != NULL) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, names[i]);
        return -1;
      }
      out[i] = args[nargs + j];
    }
  }
  for (int i = 0; i < required; i++) {
    if (out[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, names[i]);
      return -1;
    }
  }
  return 0;
}

/* A key's bytes: a str's UTF-8 (its own cached copy) or a bytes object's bytes. */
static inline int key_bytes(PyObject *key, const char **p, Py_ssize_t *n) {
  if (PyUnicode_Check(key) && PyUnicode_IS_COMPACT_ASCII(key)) {
    /* The common key: an ASCII str's characters are its UTF-8, stored in the object. */
    *p = (const char *)PyUnicode_DATA(key);
    *n = PyUnicode_GET_LENGTH(key);
    return 0;
  }
  if (PyUnicode_Check(key)) {
    *p = PyUnicode_AsUTF8AndSize(key, n);
    return *p == NULL ? -1 : 0;
  }
  if (PyBytes_Check(key)) {
    *p = PyBytes_AS_STRING(key);
    *n = PyBytes_GET_SIZE(key);
    return 0;
  }
  PyErr_Format(PyExc_TypeError, "a cache key is str or bytes, not %.100s", Py_TYPE(key)->tp_name);
  return -1;
}

/* A time-to-live: None (or absent) never expires; else a positive number of seconds. */
static int ttl_seconds(PyObject *o, double *ttl) {
  if (o == NULL || o == Py_None) {
    *ttl = 0;
    return 0;
  }
  if (PyBool_Check(o) || !(PyLong_Check(o) || PyFloat_Check(o))) {
    PyErr_Format(PyExc_TypeError, "ttl is a number of seconds or None, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
  }
  double d = PyFloat_AsDouble(o);
  if (d == -1.0 && PyErr_Occurred()) return -1;
  if (!(d > 0) || isinf(d)) {
    if (isinf(d) && d > 0) {
      *ttl = 0;
      return 0;
    }
    PyErr_Format(PyExc_ValueError, "ttl must be a positive number of seconds (or None: never expires), not %R", o);
    return -1;
  }
  *ttl = d;
  return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Values                                                                              */

static PyObject *pickle_dumps, *pickle_loads;

static int load_pickle(void) {
  if (pickle_dumps != NULL) return 0;
  PyObject *m = PyImport_ImportModule("pickle");
  if (m == NULL) return -1;
  pickle_dumps = PyObject_GetAttrString(m, "dumps");
  pickle_loads = PyObject_GetAttrString(m, "loads");
  Py_DECREF(m);
  return pickle_dumps != NULL && pickle_loads != NULL ? 0 : -1;
}

typedef struct {
  PyObject_HEAD mc_cache *cache; /* NULL once closed */
  int value_type;
  char pickle;
  PyObject *path;
  uint64_t capacity;
  uint32_t max_key_size, max_value_size, partition_count;
  char writable;
} CacheObject;

/* An encoded value: its bytes, and what keeps them alive until release. */
typedef struct {
  const char *data;
  Py_ssize_t length;
  char stack[512];
  char *heap;
  PyObject *owner;
  Py_buffer view;
  int has_view;
} encoded;

static void encoded_release(encoded *e) {
  if (e->heap != NULL) PyMem_Free(e->heap);
  Py_XDECREF(e->owner);
  if (e->has_view) PyBuffer_Release(&e->view);
}

/* A tag byte followed by `n` bytes at `p`, contiguous. */
static int tagged(encoded *e, char tag, const char *p, Py_ssize_t n) {
  char *dst = e->stack;
  if ((size_t)n + 1 > sizeof e->stack) {
    e->heap = PyMem_Malloc((size_t)n + 1);
    if (e->heap == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    dst = e->heap;
  }
  dst[0] = tag;
  if (n > 0) memcpy(dst + 1, p, (size_t)n);
  e->data = dst;
  e->length = n + 1;
  return 0;
}

static int encode_value(CacheObject *self, PyObject *v, encoded *e) {
  memset(e, 0, offsetof(encoded, stack));
  e->heap = NULL;
  e->owner = NULL;
  e->has_view = 0;
  switch (self->value_type) {
  case VT_BYTES:
    if (PyBytes_Check(v)) {
      e->data = PyBytes_AS_STRING(v);
      e->length = PyBytes_GET_SIZE(v);
      return 0;
    }
    if (PyUnicode_Check(v) || PyObject_GetBuffer(v, &e->view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "a cache of bytes stores bytes-like values, not %.100s%s", Py_TYPE(v)->tp_name,
                   PyUnicode_Check(v) ? " (encode it)" : "");
      return -1;
    }
    e->has_view = 1;
    e->data = e->view.buf;
    e->length = e->view.len;
    return 0;
  case VT_STRING:
    if (!PyUnicode_Check(v)) {
      PyErr_Format(PyExc_TypeError, "a cache of strings stores str values, not %.100s", Py_TYPE(v)->tp_name);
      return -1;
    }
    e->data = PyUnicode_AsUTF8AndSize(v, &e->length);
    return e->data == NULL ? -1 : 0;
  case VT_INT64: {
    if (!PyLong_Check(v) || PyBool_Check(v)) {
      PyErr_Format(PyExc_TypeError, "a cache of int64 stores int values, not %.100s", Py_TYPE(v)->tp_name);
      return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    for (int i = 0; i < 8; i++) e->stack[i] = (char)((unsigned long long)x >> (8 * i));
    e->data = e->stack;
    e->length = 8;
    return 0;
  }
  default: break;
  }
  /* python: a tag, then the value. */
  if (PyBytes_Check(v)) return tagged(e, 'B', PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
  if (PyUnicode_Check(v)) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(v, &n);
    return p == NULL ? -1 : tagged(e, 'S', p, n);
  }
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
      char digits[32];
      int n = snprintf(digits, sizeof digits, "%lld", x);
      return tagged(e, 'I', digits, n);
    }
    PyObject *s = PyObject_Str(v);
    if (s == NULL) return -1;
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    int r = p == NULL ? -1 : tagged(e, 'I', p, n);
    Py_DECREF(s);
    return r;
  }
  if (PyFloat_CheckExact(v)) {
    double d = PyFloat_AS_DOUBLE(v);
    char le[8];
    uint64_t bits;
    memcpy(&bits, &d, 8);
    for (int i = 0; i < 8; i++) le[i] = (char)(bits >> (8 * i));
    return tagged(e, 'F', le, 8);
  }
  if (PyByteArray_Check(v) || PyMemoryView_Check(v)) {
    if (PyObject_GetBuffer(v, &e->view, PyBUF_SIMPLE) != 0) return -1;
    e->has_view = 1;
    return tagged(e, 'B', e->view.buf, e->view.len);
  }
  if (!self->pickle) {
    PyErr_Format(PyExc_TypeError,
                 "a value of type %.100s needs pickle=True (without it the cache stores bytes, str, int and "
                 "float)",
                 Py_TYPE(v)->tp_name);
    return -1;
  }
  if (load_pickle() < 0) return -1;
  PyObject *protocol = PyLong_FromLong(5);
  PyObject *p = protocol ? PyObject_CallFunctionObjArgs(pickle_dumps, v, protocol, NULL) : NULL;
  Py_XDECREF(protocol);
  if (p == NULL) return -1;
  e->owner = p;
  return tagged(e, 'P', PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p));
}

static PyObject *decode_other(CacheObject *self, const char *p, size_t n);

/* A stored value as a Python object (a new reference), or NULL with an exception. The
 * python type's bytes and str, the values most reads return, are decoded inline. */
static inline PyObject *decode_value(CacheObject *self, const char *p, size_t n) {
  if (self->value_type == VT_PYTHON && n > 0) {
    if (p[0] == 'B') return PyBytes_FromStringAndSize(p + 1, (Py_ssize_t)n - 1);
    if (p[0] == 'S') return PyUnicode_DecodeUTF8(p + 1, (Py_ssize_t)n - 1, "strict");
  }
  return decode_other(self, p, n);
}

static PyObject *decode_other(CacheObject *self, const char *p, size_t n) {
  switch (self->value_type) {
  case VT_BYTES: return PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
  case VT_STRING: return PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "strict");
  case VT_INT64: {
    if (n != 8) {
      PyErr_Format(DecodingError, "a value of %zu bytes in a cache of int64 (8-byte values)", n);
      return NULL;
    }
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | (unsigned char)p[i];
    return PyLong_FromLongLong((long long)x);
  }
  default: break;
  }
  if (n == 0) {
    PyErr_SetString(DecodingError, "an empty value in a cache of python values (it needs a tag byte)");
    return NULL;
  }
  const char *d = p + 1;
  Py_ssize_t m = (Py_ssize_t)n - 1;
  switch (p[0]) {
  case 'B': return PyBytes_FromStringAndSize(d, m);
  case 'S': return PyUnicode_DecodeUTF8(d, m, "strict");
  case 'I': {
    char small[32];
    char *text = m < (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)m + 1);
    if (text == NULL) return PyErr_NoMemory();
    memcpy(text, d, (size_t)m);
    text[m] = 0;
    char *end = NULL;
    PyObject *r = PyLong_FromString(text, &end, 10);
    if (r != NULL && (m == 0 || end != text + m)) {
      Py_CLEAR(r);
      PyErr_SetString(DecodingError, "a malformed integer in a cache of python values");
    }
    if (text != small) PyMem_Free(text);
    return r;
  }
  case 'F': {
    if (m != 8) {
      PyErr_SetString(DecodingError, "a malformed float in a cache of python values");
      return NULL;
    }
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--) bits = bits << 8 | (unsigned char)d[i];
    double x;
    memcpy(&x, &bits, 8);
    return PyFloat_FromDouble(x);
  }
  case 'P': {
    if (!self->pickle) {
      PyErr_SetString(DecodingError, "the stored value is a pickle: open the cache with pickle=True to read it");
      return NULL;
    }
    if (load_pickle() < 0) return NULL;
    PyObject *b = PyBytes_FromStringAndSize(d, m);
    if (b == NULL) return NULL;
    PyObject *r = PyObject_CallOneArg(pickle_loads, b);
    Py_DECREF(b);
    return r;
  }
  case 'J': {
    /* JSON text: what the Node addon stores for values that are none of the above. */
    PyObject *text = PyUnicode_DecodeUTF8(d, m, "strict");
    PyObject *json = text != NULL ? PyImport_ImportModule("json") : NULL;
    PyObject *r = json != NULL ? PyObject_CallMethod(json, "loads", "O", text) : NULL;
    Py_XDECREF(json);
    Py_XDECREF(text);
    return r;
  }
  default:
    PyErr_Format(DecodingError, "an unknown value tag 0x%02x in a cache of python values", (unsigned char)p[0]);
    return NULL;
  }
}

/* ---------------------------------------------------------------------------------- */
/* The Cache type                                                                      */

static PyTypeObject CacheType, ClaimType;

static inline int check_open(CacheObject *self) {
  if (self->cache != NULL) return 0;
  PyErr_SetString(ClosedError, "the cache is closed");
  return -1;
}

/* A value larger than the stack buffer of `read_value` (`n` bytes when last asked): read
 * again at its size, a few times should it grow meanwhile. */
static PyObject *read_large(CacheObject *self, const char *k, Py_ssize_t kn, size_t n, int *found) {
  int s = MC_E_BUFFER_TOO_SMALL;
  for (int tries = 0; s == MC_E_BUFFER_TOO_SMALL && tries < 8; tries++) {
    size_t want = n;
    char *heap = PyMem_Malloc(want == 0 ? 1 : want);
    if (heap == NULL) return PyErr_NoMemory();
    s = mc_get(self->cache, k, (size_t)kn, heap, want, &n);
    if (s == MC_OK) {
      *found = 1;
      PyObject *r = decode_value(self, heap, n);
      PyMem_Free(heap);
      return r;
    }
    PyMem_Free(heap);
    if (s == MC_NOT_FOUND) return NULL;
  }
  return raise_status(s);
}

/* The value of a key: a new reference; NULL with *found 0 and no error for a miss. Inline
 * in each caller: a get is one call of the library, and no other. */
static inline PyObject *read_value(CacheObject *self, const char *k, Py_ssize_t kn, int *found) {
  char stack[1024];
  size_t n = 0;
  *found = 0;
  int s = mc_get(self->cache, k, (size_t)kn, stack, sizeof stack, &n);
  if (s == MC_OK) {
    *found = 1;
    return decode_value(self, stack, n);
  }
  if (s == MC_NOT_FOUND) return NULL;
  if (s == MC_E_BUFFER_TOO_SMALL) return read_large(self, k, kn, n, found);
  return raise_status(s);
}

/* mc_open, except that with no value type asked for, an existing untyped file (`mapped-cache
 * create`'s default) opens as bytes rather than as the type a new file is created with:
 * what the CLI or Swift's CacheFile stored there has no tag to read. An existing typed
 * file opens as its own type either way; a missing one is created as asked. */
static int open_file(const char *path, const mc_options *options, mc_cache **cache) {
  if (options->value_type != NULL) return mc_open(path, options, cache);
  mc_options existing = *options;
  existing.flags |= MC_OPEN_NO_CREATE;
  existing.create_value_type = "bytes";
  int s = mc_open(path, &existing, cache);
  if (s == MC_E_SYSTEM && mc_last_errno() == ENOENT && (options->flags & MC_OPEN_NO_CREATE) == 0)
    s = mc_open(path, options, cache);
  return s;
}

static int Cache_init(CacheObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"path", "capacity", "value_type", "create_value_type", "pickle", "read_only", "create",
                           "max_key_size", "max_value_size", "average_entry_size", "max_processes", "mode",
                           "shared_group", "verify_checksums", "use_flock", "partitions", NULL};
  PyObject *path = NULL;
  unsigned long long capacity = 0;
  const char *value_type = NULL, *create_value_type = "python", *shared_group = NULL;
  int pickle = 0, read_only = 0, create = 1, verify = 0, flock = 0;
  unsigned int max_key = 0, max_value = 0, average = 0, max_processes = 0, mode = 0, partitions = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|K$zzpppIIIIIzppI", kwlist, PyUnicode_FSConverter, &path,
                                   &capacity, &value_type, &create_value_type, &pickle, &read_only, &create,
                                   &max_key, &max_value, &average, &max_processes, &mode, &shared_group, &verify,
                                   &flock, &partitions))
    return -1;
  if (self->cache != NULL) {
    Py_DECREF(path);
    PyErr_SetString(PyExc_RuntimeError, "the cache is already open");
    return -1;
  }
  if (value_type != NULL && strcmp(value_type, "str") == 0) value_type = "string";
  if (create_value_type != NULL && strcmp(create_value_type, "str") == 0) create_value_type = "string";
  mc_options o;
  mc_options_init(&o);
  o.capacity = capacity;
  o.max_key_size = max_key;
  o.max_value_size = max_value;
  o.average_entry_size = average;
  o.max_processes = max_processes;
  o.partition_count = partitions;
  o.mode = mode;
  o.value_type = value_type;
  o.create_value_type = create_value_type;
  o.shared_group = shared_group;
  o.flags = (read_only ? MC_OPEN_READ_ONLY : 0) | (create ? 0 : MC_OPEN_NO_CREATE) |
            (verify ? MC_OPEN_VERIFY_CHECKSUMS : 0) | (flock ? MC_OPEN_FLOCK : 0);
  mc_cache *cache = NULL;
  int s = open_file(PyBytes_AS_STRING(path), &o, &cache);
  if (s != MC_OK) {
    Py_DECREF(path);
    raise_status(s);
    return -1;
  }
  mc_info info;
  info.struct_size = sizeof info;
  s = mc_info_get(cache, &info);
  if (s != MC_OK) {
    mc_close(cache);
    Py_DECREF(path);
    raise_status(s);
    return -1;
  }
  self->value_type = VT_PYTHON;
  for (int i = 0; i < 4; i++)
    if (strcmp(info.value_type, value_type_names[i]) == 0) self->value_type = i;
  self->cache = cache;
  self->pickle = pickle;
  self->capacity = info.capacity;
  self->max_key_size = info.max_key_size;
  self->max_value_size = info.max_value_size;
  self->partition_count = info.partition_count;
  self->writable = info.writable != 0;
  Py_XSETREF(self->path, PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path)));
  Py_DECREF(path);
  return self->path == NULL ? -1 : 0;
}

static void Cache_dealloc(CacheObject *self) {
  if (self->cache != NULL) mc_close(self->cache);
  Py_XDECREF(self->path);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Cache_close(CacheObject *self, PyObject *unused) {
  (void)unused;
  if (self->cache != NULL) {
    mc_close(self->cache);
    self->cache = NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *Cache_enter(CacheObject *self, PyObject *unused) {
  (void)unused;
  if (check_open(self) < 0) return NULL;
  return Py_NewRef(self);
}

static PyObject *Cache_exit(CacheObject *self, PyObject *args) {
  (void)args;
  return Cache_close(self, NULL);
}

static PyObject *Cache_get(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"key", "default"};
  PyObject *a[2] = {NULL, NULL};
  if (kwnames == NULL && nargs >= 1 && nargs <= 2) {
    a[0] = args[0];
    if (nargs == 2) a[1] = args[1];
  } else if (parse_args("get", args, nargs, kwnames, names, 1, 2, a) < 0) {
    return NULL;
  }
  if (check_open(self) < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(a[0], &k, &kn) < 0) return NULL;
  int found;
  PyObject *v = read_value(self, k, kn, &found);
  if (v != NULL || found || PyErr_Occurred()) return v;
  return Py_NewRef(a[1] != NULL ? a[1] : Py_None);
}

static PyObject *Cache_subscript(CacheObject *self, PyObject *key) {
  if (check_open(self) < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(key, &k, &kn) < 0) return NULL;
  int found;
  PyObject *v = read_value(self, k, kn, &found);
  if (v == NULL && !found && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
  return v;
}

/* set, add, replace: 0 plain, 1 add, 2 replace. Returns the C status. */
static int store_value(CacheObject *self, PyObject *key, PyObject *value, double ttl, int mode) {
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(key, &k, &kn) < 0) return -1000;
  encoded e;
  if (encode_value(self, value, &e) < 0) return -1000;
  int s;
  if (mode == 0)
    s = mc_set(self->cache, k, (size_t)kn, e.data, (size_t)e.length, ttl);
  else if (mode == 1)
    s = mc_add(self->cache, k, (size_t)kn, e.data, (size_t)e.length, ttl);
  else
    s = mc_replace(self->cache, k, (size_t)kn, e.data, (size_t)e.length, ttl);
  encoded_release(&e);
  if (s < 0) raise_status(s);
  return s;
}

static PyObject *store_method(CacheObject *self, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames, int mode) {
  static const char *const names[] = {"key", "value", "ttl"};
  PyObject *a[3] = {NULL, NULL, NULL};
  if (kwnames == NULL && nargs == 2) {
    a[0] = args[0];
    a[1] = args[1];
  } else if (parse_args(fname, args, nargs, kwnames, names, 2, 3, a) < 0) {
    return NULL;
  }
  if (check_open(self) < 0) return NULL;
  double ttl;
  if (ttl_seconds(a[2], &ttl) < 0) return NULL;
  int s = store_value(self, a[0], a[1], ttl, mode);
  if (s < 0) return NULL;
  if (mode == 0) Py_RETURN_NONE;
  return PyBool_FromLong(s == MC_OK);
}

static PyObject *Cache_set(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return store_method(self, "set", args, nargs, kwnames, 0);
}
static PyObject *Cache_add(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return store_method(self, "add", args, nargs, kwnames, 1);
}
static PyObject *Cache_replace(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return store_method(self, "replace", args, nargs, kwnames, 2);
}

static int Cache_ass_subscript(CacheObject *self, PyObject *key, PyObject *value) {
  if (check_open(self) < 0) return -1;
  if (value != NULL) return store_value(self, key, value, 0, 0) < 0 ? -1 : 0;
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(key, &k, &kn) < 0) return -1;
  int s = mc_delete(self->cache, k, (size_t)kn);
  if (s == MC_NOT_FOUND) {
    PyErr_SetObject(PyExc_KeyError, key);
    return -1;
  }
  return s < 0 ? (raise_status(s), -1) : 0;
}

/* One key argument: the key's bytes, or -1. */
static int one_key(CacheObject *self, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, const char **k, Py_ssize_t *kn) {
  static const char *const names[] = {"key"};
  PyObject *a[1] = {NULL};
  if (parse_args(fname, args, nargs, kwnames, names, 1, 1, a) < 0) return -1;
  if (check_open(self) < 0) return -1;
  return key_bytes(a[0], k, kn);
}

/* One argument, an iterable of keys: it as a list or tuple (PySequence_Fast), or NULL. */
static PyObject *keys_arg(CacheObject *self, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  static const char *const names[] = {"keys"};
  PyObject *a[1] = {NULL};
  if (parse_args(fname, args, nargs, kwnames, names, 1, 1, a) < 0 || check_open(self) < 0) return NULL;
  char message[64];
  snprintf(message, sizeof message, "%s() takes an iterable of keys", fname);
  return PySequence_Fast(a[0], message);
}

typedef int (*key_fn)(mc_cache *, const void *, size_t);

/* delete and is_computing: one call on a key; True when it returned MC_OK. */
static PyObject *key_status(CacheObject *self, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, key_fn fn) {
  const char *k;
  Py_ssize_t kn;
  if (one_key(self, fname, args, nargs, kwnames, &k, &kn) < 0) return NULL;
  int s = fn(self->cache, k, (size_t)kn);
  return s < 0 ? raise_status(s) : PyBool_FromLong(s == MC_OK);
}

static PyObject *Cache_delete(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return key_status(self, "delete", args, nargs, kwnames, mc_delete);
}

static int Cache_contains(CacheObject *self, PyObject *key) {
  if (check_open(self) < 0) return -1;
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(key, &k, &kn) < 0) return -1;
  int s = mc_exists(self->cache, k, (size_t)kn);
  return s < 0 ? (raise_status(s), -1) : s == MC_OK;
}

static PyObject *Cache_touch(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"key", "ttl"};
  PyObject *a[2] = {NULL, NULL};
  if (parse_args("touch", args, nargs, kwnames, names, 1, 2, a) < 0 || check_open(self) < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  double ttl;
  if (key_bytes(a[0], &k, &kn) < 0 || ttl_seconds(a[1], &ttl) < 0) return NULL;
  int s = mc_touch(self->cache, k, (size_t)kn, ttl);
  return s < 0 ? raise_status(s) : PyBool_FromLong(s == MC_OK);
}

static PyObject *Cache_ttl(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  const char *k;
  Py_ssize_t kn;
  if (one_key(self, "ttl", args, nargs, kwnames, &k, &kn) < 0) return NULL;
  double seconds = 0;
  int s = mc_ttl(self->cache, k, (size_t)kn, &seconds);
  if (s < 0) return raise_status(s);
  if (s == MC_NOT_FOUND) Py_RETURN_NONE;
  return PyFloat_FromDouble(seconds);
}

static PyObject *counter(CacheObject *self, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int sign) {
  static const char *const names[] = {"key", "delta", "initial", "ttl"};
  PyObject *a[4] = {NULL, NULL, NULL, NULL};
  if (parse_args(fname, args, nargs, kwnames, names, 1, 4, a) < 0 || check_open(self) < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  double ttl;
  long long delta = 1, initial = 0;
  if (key_bytes(a[0], &k, &kn) < 0 || ttl_seconds(a[3], &ttl) < 0) return NULL;
  if (a[1] != NULL && ((delta = PyLong_AsLongLong(a[1])) == -1 && PyErr_Occurred())) return NULL;
  if (a[2] != NULL && ((initial = PyLong_AsLongLong(a[2])) == -1 && PyErr_Occurred())) return NULL;
  if (sign < 0) {
    if (delta == LLONG_MIN) {
      PyErr_SetString(PyExc_OverflowError, "delta is too large to negate");
      return NULL;
    }
    delta = -delta;
  }
  int64_t result = 0;
  int s = mc_incr(self->cache, k, (size_t)kn, delta, initial, ttl, &result);
  if (s == MC_E_INVALID_ARGUMENT && strstr(mc_last_error(), "overflow") != NULL) {
    PyErr_SetString(PyExc_OverflowError, mc_last_error());
    return NULL;
  }
  return s < 0 ? raise_status(s) : PyLong_FromLongLong(result);
}

static PyObject *Cache_incr(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return counter(self, "incr", args, nargs, kwnames, 1);
}
static PyObject *Cache_decr(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return counter(self, "decr", args, nargs, kwnames, -1);
}

static PyObject *Cache_gets(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  const char *k;
  Py_ssize_t kn;
  if (one_key(self, "gets", args, nargs, kwnames, &k, &kn) < 0) return NULL;
  char stack[1024];
  char *buf = stack;
  size_t cap = sizeof stack, n = 0;
  uint64_t version = 0;
  int s;
  for (int tries = 0;; tries++) {
    s = mc_gets(self->cache, k, (size_t)kn, buf, cap, &n, &version);
    if (s != MC_E_BUFFER_TOO_SMALL || tries == 8) break;
    if (buf != stack) PyMem_Free(buf);
    buf = PyMem_Malloc(n);
    cap = n;
    if (buf == NULL) return PyErr_NoMemory();
  }
  PyObject *r = NULL;
  if (s == MC_OK) {
    PyObject *v = decode_value(self, buf, n);
    if (v != NULL) r = Py_BuildValue("(NK)", v, (unsigned long long)version);
  } else if (s == MC_NOT_FOUND) {
    r = Py_NewRef(Py_None);
  } else {
    raise_status(s);
  }
  if (buf != stack) PyMem_Free(buf);
  return r;
}

static PyObject *Cache_cas(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"key", "value", "version", "ttl"};
  PyObject *a[4] = {NULL, NULL, NULL, NULL};
  if (parse_args("cas", args, nargs, kwnames, names, 3, 4, a) < 0 || check_open(self) < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  double ttl;
  if (key_bytes(a[0], &k, &kn) < 0 || ttl_seconds(a[3], &ttl) < 0) return NULL;
  unsigned long long version = PyLong_AsUnsignedLongLong(a[2]);
  if (version == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  encoded e;
  if (encode_value(self, a[1], &e) < 0) return NULL;
  int s = mc_cas(self->cache, k, (size_t)kn, e.data, (size_t)e.length, ttl, version);
  encoded_release(&e);
  return s < 0 ? raise_status(s) : PyBool_FromLong(s == MC_OK);
}

static PyObject *Cache_get_many(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *list = keys_arg(self, "get_many", args, nargs, kwnames);
  if (list == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
  PyObject **items = PySequence_Fast_ITEMS(list);
  PyObject *out = PyDict_New();
  enum { group = 64, room = 512 };
  const void *keys[group];
  size_t key_lengths[group], caps[group];
  void *bufs[group];
  int64_t lengths[group];
  char *scratch = PyMem_Malloc(group * room);
  if (out == NULL || scratch == NULL) goto fail;
  for (int j = 0; j < group; j++) {
    bufs[j] = scratch + j * room;
    caps[j] = room;
  }
  for (Py_ssize_t start = 0; start < n; start += group) {
    Py_ssize_t m = n - start < group ? n - start : group;
    for (Py_ssize_t j = 0; j < m; j++) {
      const char *k;
      Py_ssize_t kn;
      if (key_bytes(items[start + j], &k, &kn) < 0) goto fail;
      keys[j] = k;
      key_lengths[j] = (size_t)kn;
    }
    int s = mc_get_many(self->cache, (size_t)m, keys, key_lengths, bufs, caps, lengths, NULL);
    if (s < 0) {
      raise_status(s);
      goto fail;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
      if (lengths[j] == MC_MISSING) continue;
      PyObject *v;
      if (lengths[j] <= room) {
        v = decode_value(self, bufs[j], (size_t)lengths[j]);
      } else {
        int found;
        v = read_value(self, keys[j], (Py_ssize_t)key_lengths[j], &found);
        if (v == NULL && !found && !PyErr_Occurred()) continue;
      }
      if (v == NULL || PyDict_SetItem(out, items[start + j], v) < 0) {
        Py_XDECREF(v);
        goto fail;
      }
      Py_DECREF(v);
    }
  }
  PyMem_Free(scratch);
  Py_DECREF(list);
  return out;
fail:
  PyMem_Free(scratch);
  Py_DECREF(list);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *Cache_set_many(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"mapping", "ttl"};
  PyObject *a[2] = {NULL, NULL};
  if (parse_args("set_many", args, nargs, kwnames, names, 1, 2, a) < 0 || check_open(self) < 0) return NULL;
  double ttl;
  if (ttl_seconds(a[1], &ttl) < 0) return NULL;
  PyObject *pairs = PyDict_Check(a[0]) ? PyDict_Items(a[0]) : PySequence_List(a[0]);
  if (pairs == NULL) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(pairs);
  const void **keys = PyMem_Calloc((size_t)n + 1, sizeof(void *));
  const void **values = PyMem_Calloc((size_t)n + 1, sizeof(void *));
  size_t *key_lengths = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
  size_t *value_lengths = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
  encoded *enc = PyMem_Calloc((size_t)n + 1, sizeof(encoded));
  Py_ssize_t done = 0;
  PyObject *r = NULL;
  if (!keys || !values || !key_lengths || !value_lengths || !enc) {
    PyErr_NoMemory();
    goto out;
  }
  for (; done < n; done++) {
    PyObject *pair = PyList_GET_ITEM(pairs, done);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_SetString(PyExc_TypeError, "set_many() takes a mapping or an iterable of (key, value) pairs");
      goto out;
    }
    const char *k;
    Py_ssize_t kn;
    if (key_bytes(PyTuple_GET_ITEM(pair, 0), &k, &kn) < 0) goto out;
    if (encode_value(self, PyTuple_GET_ITEM(pair, 1), &enc[done]) < 0) goto out;
    keys[done] = k;
    key_lengths[done] = (size_t)kn;
    values[done] = enc[done].data;
    value_lengths[done] = (size_t)enc[done].length;
  }
  int s = mc_set_many(self->cache, (size_t)n, keys, key_lengths, values, value_lengths, ttl);
  r = s < 0 ? raise_status(s) : Py_NewRef(Py_None);
out:
  for (Py_ssize_t j = 0; enc != NULL && j < done; j++) encoded_release(&enc[j]);
  PyMem_Free(keys);
  PyMem_Free(values);
  PyMem_Free(key_lengths);
  PyMem_Free(value_lengths);
  PyMem_Free(enc);
  Py_DECREF(pairs);
  return r;
}

static PyObject *Cache_delete_many(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *list = keys_arg(self, "delete_many", args, nargs, kwnames);
  if (list == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
  const void **keys = PyMem_Calloc((size_t)n + 1, sizeof(void *));
  size_t *lengths = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
  PyObject *r = NULL;
  if (keys == NULL || lengths == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t j = 0; j < n; j++) {
    const char *k;
    Py_ssize_t kn;
    if (key_bytes(PySequence_Fast_GET_ITEM(list, j), &k, &kn) < 0) goto out;
    keys[j] = k;
    lengths[j] = (size_t)kn;
  }
  size_t removed = 0;
  int s = mc_delete_many(self->cache, (size_t)n, keys, lengths, &removed);
  r = s < 0 ? raise_status(s) : PyLong_FromSize_t(removed);
out:
  PyMem_Free(keys);
  PyMem_Free(lengths);
  Py_DECREF(list);
  return r;
}

/* Iteration: mc_foreach into a list of keys, values or (key, value) pairs. */
typedef struct {
  CacheObject *self;
  PyObject *list;
  int what; /* 0 keys, 1 values, 2 items */
  int failed;
} walk;

static int walk_visit(void *context, const void *key, size_t klen, const void *value, size_t vlen, double ttl) {
  (void)ttl;
  walk *w = context;
  PyObject *k = w->what != 1 ? PyUnicode_DecodeUTF8(key, (Py_ssize_t)klen, "strict") : NULL;
  PyObject *v = w->what != 0 ? decode_value(w->self, value, vlen) : NULL;
  PyObject *item = NULL;
  if ((w->what != 1 && k == NULL) || (w->what != 0 && v == NULL)) goto fail;
  item = w->what == 0 ? Py_NewRef(k) : w->what == 1 ? Py_NewRef(v) : PyTuple_Pack(2, k, v);
  if (item == NULL || PyList_Append(w->list, item) < 0) goto fail;
  Py_XDECREF(k);
  Py_XDECREF(v);
  Py_DECREF(item);
  return 0;
fail:
  Py_XDECREF(k);
  Py_XDECREF(v);
  Py_XDECREF(item);
  w->failed = 1;
  return 1;
}

static PyObject *walk_list(CacheObject *self, int what) {
  if (check_open(self) < 0) return NULL;
  walk w = {self, PyList_New(0), what, 0};
  if (w.list == NULL) return NULL;
  int s = mc_foreach(self->cache, what == 0 ? MC_FOREACH_KEYS_ONLY : 0, walk_visit, &w);
  if (w.failed || s < 0) {
    Py_DECREF(w.list);
    return w.failed ? NULL : raise_status(s);
  }
  return w.list;
}

static PyObject *Cache_keys(CacheObject *self, PyObject *unused) {
  (void)unused;
  return walk_list(self, 0);
}
static PyObject *Cache_values(CacheObject *self, PyObject *unused) {
  (void)unused;
  return walk_list(self, 1);
}
static PyObject *Cache_items(CacheObject *self, PyObject *unused) {
  (void)unused;
  return walk_list(self, 2);
}

static PyObject *Cache_iter(CacheObject *self) {
  PyObject *keys = walk_list(self, 0);
  if (keys == NULL) return NULL;
  PyObject *it = PyObject_GetIter(keys);
  Py_DECREF(keys);
  return it;
}

static int read_stats(CacheObject *self, mc_stats *st) {
  if (check_open(self) < 0) return -1;
  st->struct_size = sizeof *st;
  int s = mc_stats_get(self->cache, st);
  return s < 0 ? (raise_status(s), -1) : 0;
}

static Py_ssize_t Cache_len(CacheObject *self) {
  mc_stats st;
  return read_stats(self, &st) < 0 ? -1 : (Py_ssize_t)st.entries;
}

static PyObject *Cache_stats(CacheObject *self, PyObject *unused) {
  (void)unused;
  mc_stats st;
  if (read_stats(self, &st) < 0) return NULL;
  double ratio = st.hits + st.misses == 0 ? 0 : (double)st.hits / (double)(st.hits + st.misses);
  return Py_BuildValue(
      "{sLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsd}", "entries", (long long)st.entries, "live_bytes",
      (long long)st.live_bytes, "capacity", (long long)st.capacity, "hits", (long long)st.hits, "misses",
      (long long)st.misses, "busy_misses", (long long)st.busy_misses, "sets", (long long)st.sets, "evictions",
      (long long)st.evictions, "expirations", (long long)st.expirations, "recoveries", (long long)st.recoveries,
      "removals", (long long)st.removals, "lock_takeovers", (long long)st.lock_takeovers, "slot_count",
      (long long)st.slot_count, "max_entries", (long long)st.max_entries, "count_limit", (long long)st.count_limit,
      "cost_limit", (long long)st.cost_limit, "partition_count", (long long)st.partition_count, "index_splits",
      (long long)st.index_splits, "index_merges", (long long)st.index_merges, "hit_ratio", ratio);
}

static PyObject *Cache_verify(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"repair"};
  PyObject *a[1] = {NULL};
  if (parse_args("verify", args, nargs, kwnames, names, 0, 1, a) < 0 || check_open(self) < 0) return NULL;
  int repair = a[0] != NULL ? PyObject_IsTrue(a[0]) : 0;
  if (repair < 0) return NULL;
  size_t problems = 0;
  int s = mc_verify(self->cache, repair, &problems);
  return s < 0 ? raise_status(s) : PyLong_FromSize_t(problems);
}

static PyObject *Cache_grow(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"capacity"};
  PyObject *a[1] = {NULL};
  if (parse_args("grow", args, nargs, kwnames, names, 1, 1, a) < 0 || check_open(self) < 0) return NULL;
  long long capacity = PyLong_AsLongLong(a[0]);
  if (capacity == -1 && PyErr_Occurred()) return NULL;
  int64_t grown = 0;
  int s;
  Py_BEGIN_ALLOW_THREADS
  s = mc_grow(self->cache, (int64_t)capacity, &grown);
  Py_END_ALLOW_THREADS
  return s < 0 ? raise_status(s) : PyLong_FromLongLong((long long)grown);
}

static PyObject *Cache_set_growth_policy(CacheObject *self, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames) {
  static const char *const names[] = {"ghost_hit_rate", "factor", "min_interval", "min_inserts"};
  PyObject *a[4] = {NULL, NULL, NULL, NULL};
  if (parse_args("set_growth_policy", args, nargs, kwnames, names, 1, 4, a) < 0 || check_open(self) < 0) return NULL;
  double rate = 0, factor = 2, interval = 60;
  long long inserts = 10000;
  if (a[0] != Py_None) {
    rate = PyFloat_AsDouble(a[0]);
    if (rate == -1 && PyErr_Occurred()) return NULL;
    if (rate == 0) {
      PyErr_SetString(PyExc_ValueError, "ghost_hit_rate must be between 0.001 and 1 (None removes the policy)");
      return NULL;
    }
  }
  if (a[1] != NULL && (factor = PyFloat_AsDouble(a[1])) == -1 && PyErr_Occurred()) return NULL;
  if (a[2] != NULL && (interval = PyFloat_AsDouble(a[2])) == -1 && PyErr_Occurred()) return NULL;
  if (a[3] != NULL && (inserts = PyLong_AsLongLong(a[3])) == -1 && PyErr_Occurred()) return NULL;
  int s = mc_set_growth_policy(self->cache, rate, factor, interval, (int64_t)inserts);
  return s < 0 ? raise_status(s) : Py_NewRef(Py_None);
}

static PyObject *Cache_clear(CacheObject *self, PyObject *unused) {
  (void)unused;
  if (check_open(self) < 0) return NULL;
  int s = mc_clear(self->cache);
  return s < 0 ? raise_status(s) : Py_NewRef(Py_None);
}

static PyObject *Cache_sweep(CacheObject *self, PyObject *unused) {
  (void)unused;
  if (check_open(self) < 0) return NULL;
  size_t removed = 0;
  int s = mc_sweep(self->cache, &removed);
  return s < 0 ? raise_status(s) : PyLong_FromSize_t(removed);
}

static PyObject *Cache_set_limits(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"count", "cost"};
  PyObject *a[2] = {NULL, NULL};
  if (parse_args("set_limits", args, nargs, kwnames, names, 0, 2, a) < 0 || check_open(self) < 0) return NULL;
  long long limits[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    if (a[i] == NULL || a[i] == Py_None) continue;
    limits[i] = PyLong_AsLongLong(a[i]);
    if (limits[i] == -1 && PyErr_Occurred()) return NULL;
    if (limits[i] < 0) {
      PyErr_Format(PyExc_ValueError, "%s must be 0 (no limit) or more", names[i]);
      return NULL;
    }
  }
  int s = mc_set_limits(self->cache, limits[0], limits[1]);
  return s < 0 ? raise_status(s) : Py_NewRef(Py_None);
}

static PyObject *Cache_is_computing(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return key_status(self, "is_computing", args, nargs, kwnames, mc_is_computing);
}

/* ---------------------------------------------------------------------------------- */
/* Claims                                                                              */

typedef struct {
  PyObject_HEAD mc_claim *claim; /* NULL once published or abandoned */
  CacheObject *cache;
} ClaimObject;

/* _claim(key, serve_stale=False) -> (status, value, claim): one look, never waiting.
 * status is OK or STALE (value set), CLAIMED (claim set: publish or abandon it) or BUSY
 * (another process computes: look again later). */
static PyObject *Cache_claim(CacheObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"key", "serve_stale"};
  PyObject *a[2] = {NULL, NULL};
  if (parse_args("_claim", args, nargs, kwnames, names, 1, 2, a) < 0 || check_open(self) < 0) return NULL;
  int stale = a[1] != NULL ? PyObject_IsTrue(a[1]) : 0;
  if (stale < 0) return NULL;
  const char *k;
  Py_ssize_t kn;
  if (key_bytes(a[0], &k, &kn) < 0) return NULL;
  char stack[1024];
  size_t n = 0;
  mc_claim *claim = NULL;
  int s = mc_get_or_claim(self->cache, k, (size_t)kn, 0, stale ? MC_CLAIM_SERVE_STALE : 0, stack, sizeof stack, &n,
                          &claim);
  if (s == MC_E_BUFFER_TOO_SMALL) {
    int found;
    PyObject *v = read_value(self, k, kn, &found);
    if (v != NULL) return Py_BuildValue("(iNO)", MC_OK, v, Py_None);
    if (PyErr_Occurred()) return NULL;
    return Py_BuildValue("(iOO)", MC_BUSY, Py_None, Py_None); /* gone meanwhile: look again */
  }
  if (s < 0) return raise_status(s);
  if (s == MC_OK || s == MC_STALE) {
    PyObject *v = decode_value(self, stack, n);
    return v == NULL ? NULL : Py_BuildValue("(iNO)", s, v, Py_None);
  }
  if (s == MC_CLAIMED) {
    ClaimObject *c = PyObject_New(ClaimObject, &ClaimType);
    if (c == NULL) {
      mc_abandon(claim);
      return NULL;
    }
    c->claim = claim;
    c->cache = (CacheObject *)Py_NewRef(self);
    return Py_BuildValue("(iON)", s, Py_None, (PyObject *)c);
  }
  return Py_BuildValue("(iOO)", s, Py_None, Py_None);
}

static PyObject *Claim_publish(ClaimObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"value", "ttl"};
  PyObject *a[2] = {NULL, NULL};
  if (parse_args("publish", args, nargs, kwnames, names, 1, 2, a) < 0) return NULL;
  if (self->claim == NULL) {
    PyErr_SetString(ClosedError, "the claim was already published or abandoned");
    return NULL;
  }
  double ttl;
  encoded e;
  if (ttl_seconds(a[1], &ttl) < 0 || encode_value(self->cache, a[0], &e) < 0) {
    mc_abandon(self->claim);
    self->claim = NULL;
    return NULL;
  }
  int s = mc_publish(self->claim, e.data, (size_t)e.length, ttl);
  self->claim = NULL;
  encoded_release(&e);
  return s < 0 ? raise_status(s) : Py_NewRef(Py_None);
}

static PyObject *Claim_abandon(ClaimObject *self, PyObject *unused) {
  (void)unused;
  if (self->claim == NULL) Py_RETURN_NONE;
  int s = mc_abandon(self->claim);
  self->claim = NULL;
  return s < 0 ? raise_status(s) : Py_NewRef(Py_None);
}

static void Claim_dealloc(ClaimObject *self) {
  /* A claim dropped unpublished is abandoned (in a child of fork: left to the parent). */
  if (self->claim != NULL) mc_abandon(self->claim);
  Py_XDECREF(self->cache);
  PyObject_Free(self);
}

static PyMethodDef Claim_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))Claim_publish, METH_FASTCALL | METH_KEYWORDS,
     "publish(value, ttl=None): store the computed value and release the claim."},
    {"abandon", (PyCFunction)Claim_abandon, METH_NOARGS, "abandon(): release the claim without storing."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ClaimType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mappedcache._mappedcache.Claim",
    .tp_basicsize = sizeof(ClaimObject),
    .tp_dealloc = (destructor)Claim_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A claim to compute one key, from Cache._claim: publish(value) or abandon() it.",
    .tp_methods = Claim_methods,
};

/* ---------------------------------------------------------------------------------- */
/* Properties and the type                                                             */

static PyObject *Cache_get_value_type(CacheObject *self, void *unused) {
  (void)unused;
  return PyUnicode_FromString(value_type_names[self->value_type]);
}
/* The file's stats now, for the figures growth changes (another process may have grown
   the file since this one opened it); 0 and no exception when they cannot be read (a
   closed handle), for the caller to answer with the figures at open. */
static int read_current_stats(CacheObject *self, mc_stats *st) {
  if (self->cache != NULL && read_stats(self, st) == 0) return 1;
  PyErr_Clear();
  return 0;
}
static PyObject *Cache_get_capacity(CacheObject *self, void *unused) {
  (void)unused;
  mc_stats st;
  if (read_current_stats(self, &st)) return PyLong_FromLongLong((long long)st.capacity);
  return PyLong_FromUnsignedLongLong(self->capacity);
}
static PyObject *Cache_get_partition_count(CacheObject *self, void *unused) {
  (void)unused;
  mc_stats st;
  if (read_current_stats(self, &st)) return PyLong_FromLongLong((long long)st.partition_count);
  return PyLong_FromUnsignedLong(self->partition_count);
}
static PyObject *Cache_get_closed(CacheObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->cache == NULL);
}

/* The figures fixed at open, read straight from the object. */
static PyMemberDef Cache_members[] = {
    {"path", T_OBJECT, offsetof(CacheObject, path), READONLY, "The file's path."},
    {"max_key_size", T_UINT, offsetof(CacheObject, max_key_size), READONLY, "The longest key, in bytes (UTF-8)."},
    {"max_value_size", T_UINT, offsetof(CacheObject, max_value_size), READONLY, "The largest stored value, in bytes."},
    {"writable", T_BOOL, offsetof(CacheObject, writable), READONLY, "Whether this handle can write."},
    {"pickle", T_BOOL, offsetof(CacheObject, pickle), READONLY, "Whether any picklable value may be stored and read."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Cache_getset[] = {
    {"value_type", (getter)Cache_get_value_type, NULL, "bytes, string, int64 or python.", NULL},
    {"capacity", (getter)Cache_get_capacity, NULL, "The file's size in bytes now (it grows with grow()).", NULL},
    {"partition_count", (getter)Cache_get_partition_count, NULL,
     "Partitions of the file (each with its own write lock, index and logs).", NULL},
    {"closed", (getter)Cache_get_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef Cache_methods[] = {
    {"get", FN(Cache_get), FAST, "get(key, default=None): the value of key, or default when it is missing or expired. Lock-free."},
    {"set", FN(Cache_set), FAST, "set(key, value, ttl=None): stores value under key, expiring after ttl seconds (None: never)."},
    {"add", FN(Cache_add), FAST, "add(key, value, ttl=None) -> bool: stores only if key has no live entry (atomic across processes)."},
    {"replace", FN(Cache_replace), FAST, "replace(key, value, ttl=None) -> bool: stores only if key has a live entry."},
    {"delete", FN(Cache_delete), FAST, "delete(key) -> bool: removes key; False when it was not present."},
    {"touch", FN(Cache_touch), FAST, "touch(key, ttl=None) -> bool: sets a new expiry (None: never), keeping the value."},
    {"ttl", FN(Cache_ttl), FAST, "ttl(key) -> float | None: seconds until key expires (math.inf: never); None when missing."},
    {"incr", FN(Cache_incr), FAST, "incr(key, delta=1, initial=0, ttl=None) -> int: adds delta atomically across processes; a missing key starts from initial; ttl None keeps the counter's expiry."},
    {"decr", FN(Cache_decr), FAST, "decr(key, delta=1, initial=0, ttl=None) -> int: incr(key, -delta, ...)."},
    {"gets", FN(Cache_gets), FAST, "gets(key) -> (value, version) | None: the value and its version, for cas()."},
    {"cas", FN(Cache_cas), FAST, "cas(key, value, version, ttl=None) -> bool: stores only if the entry's version is still version."},
    {"get_many", FN(Cache_get_many), FAST, "get_many(keys) -> dict: the live values among keys (missing keys left out), read in batches."},
    {"set_many", FN(Cache_set_many), FAST, "set_many(mapping, ttl=None): stores every pair under one hold of the write lock; a bad pair stores nothing."},
    {"delete_many", FN(Cache_delete_many), FAST, "delete_many(keys) -> int: removes keys under one hold of the write lock; returns how many were present."},
    {"keys", (PyCFunction)Cache_keys, METH_NOARGS, "keys() -> list: the keys of the live entries (a walk without the write lock)."},
    {"values", (PyCFunction)Cache_values, METH_NOARGS, "values() -> list: the live values."},
    {"items", (PyCFunction)Cache_items, METH_NOARGS, "items() -> list: (key, value) pairs of the live entries."},
    {"stats", (PyCFunction)Cache_stats, METH_NOARGS, "stats() -> dict: the cache's counters, summed over every process (hits, misses, entries, ...)."},
    {"verify", FN(Cache_verify), FAST, "verify(repair=False) -> int: checks every invariant of the file; returns the problems found; raises CorruptedError when some remain."},
    {"set_growth_policy", FN(Cache_set_growth_policy), FAST, "set_growth_policy(ghost_hit_rate, factor=2.0, min_interval=60.0, min_inserts=10000): stores a growth policy in the file (None removes it): the cache grows by factor when ghost_hit_rate of new keys were evicted recently and came back."},
    {"grow", FN(Cache_grow), FAST, "grow(capacity) -> int: grows the file to capacity bytes (whole partitions) while every process keeps using it; returns the capacity after."},
    {"clear", (PyCFunction)Cache_clear, METH_NOARGS, "clear(): removes every entry, for every process."},
    {"sweep", (PyCFunction)Cache_sweep, METH_NOARGS, "sweep() -> int: removes expired entries now; returns how many."},
    {"set_limits", FN(Cache_set_limits), FAST, "set_limits(count=None, cost=None): entry count and key+value byte limits stored in the file (0: none; None: unchanged)."},
    {"is_computing", FN(Cache_is_computing), FAST, "is_computing(key) -> bool: whether some process is computing key through get_or_compute now."},
    {"_claim", FN(Cache_claim), FAST, "_claim(key, serve_stale=False) -> (status, value, claim): one look of get_or_compute, never waiting."},
    {"close", (PyCFunction)Cache_close, METH_NOARGS, "close(): closes the handle; later calls raise ClosedError."},
    {"__enter__", (PyCFunction)Cache_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Cache_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods Cache_mapping = {
    .mp_length = (lenfunc)Cache_len,
    .mp_subscript = (binaryfunc)Cache_subscript,
    .mp_ass_subscript = (objobjargproc)Cache_ass_subscript,
};

static PySequenceMethods Cache_sequence = {
    .sq_contains = (objobjproc)Cache_contains,
};

static PyTypeObject CacheType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mappedcache._mappedcache.CacheBase",
    .tp_basicsize = sizeof(CacheObject),
    .tp_dealloc = (destructor)Cache_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C side of mappedcache.Cache (see its documentation).",
    .tp_methods = Cache_methods,
    .tp_members = Cache_members,
    .tp_getset = Cache_getset,
    .tp_as_mapping = &Cache_mapping,
    .tp_as_sequence = &Cache_sequence,
    .tp_iter = (getiterfunc)Cache_iter,
    .tp_init = (initproc)Cache_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------------------------- */
/* The module                                                                          */

static PyObject *module_after_fork_child(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  mc_after_fork_child();
  Py_RETURN_NONE;
}

static PyObject *module_versions(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return Py_BuildValue("{sIsssi}", "abi", (unsigned)mc_abi_version(), "library", mc_version(), "file_format",
                       mc_file_format_version());
}

static PyMethodDef module_methods[] = {
    {"_after_fork_child", module_after_fork_child, METH_NOARGS,
     "Drops what a child of fork inherited (handles reopen on their next use)."},
    {"versions", module_versions, METH_NOARGS, "The C ABI, library and file format versions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mappedcache._mappedcache", "The C extension over libmappedcache (mappedcache.h).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

static PyObject *new_error(PyObject *m, const char *name, PyObject *base1, PyObject *base2, const char *doc) {
  char qualified[128];
  snprintf(qualified, sizeof qualified, "mappedcache.%s", name);
  PyObject *bases = base2 ? PyTuple_Pack(2, base1, base2) : PyTuple_Pack(1, base1);
  if (bases == NULL) return NULL;
  PyObject *e = PyErr_NewExceptionWithDoc(qualified, doc, bases, NULL);
  Py_DECREF(bases);
  if (e != NULL && PyModule_AddObjectRef(m, name, e) < 0) Py_CLEAR(e);
  return e;
}

/* The module's exceptions, in the order they are made: CacheError first, the base of the
 * others, each of which also derives from the built-in exception its errors are a kind of. */
static const struct error_type {
  PyObject **type;
  const char *name;
  PyObject **base, **builtin;
  const char *doc;
} error_types[] = {
    {&CacheError, "CacheError", &PyExc_Exception, NULL, "Every error of mappedcache."},
    {&ClosedError, "ClosedError", &CacheError, &PyExc_ValueError, "The cache (or claim) is closed."},
    {&InvalidKeyError, "InvalidKeyError", &CacheError, &PyExc_ValueError, "A key is empty, longer than the cache's limit, or not UTF-8."},
    {&InvalidValueError, "InvalidValueError", &CacheError, &PyExc_ValueError, "A value is too large for the cache, or not one of its type."},
    {&TypeMismatchError, "TypeMismatchError", &CacheError, &PyExc_TypeError, "The file holds values of another type."},
    {&NotACacheError, "NotACacheError", &CacheError, NULL, "The file is not a MappedCache file (or of another format version)."},
    {&CorruptedError, "CorruptedError", &CacheError, NULL, "The file is damaged."},
    {&ReadOnlyError, "ReadOnlyError", &CacheError, &PyExc_PermissionError, "A write on a read-only cache."},
    {&UnsafeFileError, "UnsafeFileError", &CacheError, &PyExc_PermissionError, "The file was refused for safety (owner or permissions)."},
    {&NotAnIntegerError, "NotAnIntegerError", &CacheError, &PyExc_ValueError, "incr/decr found a value that is not an integer."},
    {&ComputeFailedError, "ComputeFailedError", &CacheError, NULL, "A recent compute of the key failed and the failure is cached."},
    {&ForkedClaimError, "ForkedClaimError", &CacheError, NULL, "A claim taken by the parent before fork() was used in the child."},
    {&CacheOSError, "CacheOSError", &CacheError, &PyExc_OSError, "A system call failed."},
    {&CacheTimeoutError, "CacheTimeoutError", &CacheError, &PyExc_TimeoutError, "A wait timed out."},
    {&DecodingError, "DecodingError", &CacheError, &PyExc_ValueError, "A stored value could not be decoded."},
};

PyMODINIT_FUNC PyInit__mappedcache(void) {
  if (mc_abi_version() != MC_ABI_VERSION) {
    PyErr_Format(PyExc_ImportError, "libmappedcache has C ABI %u; this module was built for %d: reinstall it",
                 (unsigned)mc_abi_version(), MC_ABI_VERSION);
    return NULL;
  }
  if (PyType_Ready(&CacheType) < 0 || PyType_Ready(&ClaimType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  if (PyModule_AddObjectRef(m, "CacheBase", (PyObject *)&CacheType) < 0 ||
      PyModule_AddObjectRef(m, "Claim", (PyObject *)&ClaimType) < 0)
    goto fail;
  for (size_t i = 0; i < sizeof error_types / sizeof error_types[0]; i++) {
    const struct error_type *e = &error_types[i];
    *e->type = new_error(m, e->name, *e->base, e->builtin ? *e->builtin : NULL, e->doc);
    if (*e->type == NULL) goto fail;
  }
  if (PyModule_AddIntConstant(m, "OK", MC_OK) < 0 || PyModule_AddIntConstant(m, "CLAIMED", MC_CLAIMED) < 0 ||
      PyModule_AddIntConstant(m, "BUSY", MC_BUSY) < 0 || PyModule_AddIntConstant(m, "STALE", MC_STALE) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
