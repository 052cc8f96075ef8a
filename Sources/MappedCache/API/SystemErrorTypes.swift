// `SystemError` and `Errno`, which `CacheError.system` carries, are declared in the
// package's system-call target (`Sources/SystemCalls`), which every module calls the C
// library through. That target stays the package's own: it is imported, not re-exported,
// so that its name never meets a client's module of the same name, and these two aliases
// are all of it an application sees (`import MappedCache` is all it needs to catch and
// read them).
import SystemCalls

/// A failed system call: the operation that failed and its `errno` (see `code`).
///
/// `CacheError.system` carries one; its `code` is an ``Errno``, which names the errors a
/// program may want to tell apart (`.noSpace`, `.permissionDenied`, ...).
public typealias SystemError = SystemCalls.SystemError

/// An `errno` value, with names for those the package tells apart, its symbolic `name`
/// (`ENOSPC`) and its `message` (`strerror`).
public typealias Errno = SystemCalls.Errno
