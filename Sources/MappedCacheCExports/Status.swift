import CMappedCacheABI
import MappedCache

/// Errors the C ABI finds itself, before `SharedCache` is reached: in the arguments
/// C passes (NULL pointers, lengths, times, handles) and in values for a typed cache.
enum ABIError: Error, CustomStringConvertible {
  case invalidArgument(String)
  case closed(String)
  case noMemory(String)
  case invalidKey(String)
  case invalidValue(String)
  case forked(String)
  case bufferTooSmall(needed: Int, capacity: Int)

  var status: Int32 {
    switch self {
    case .invalidArgument: return MC_E_INVALID_ARGUMENT
    case .closed: return MC_E_CLOSED
    case .noMemory: return MC_E_NO_MEMORY
    case .invalidKey: return MC_E_INVALID_KEY
    case .invalidValue: return MC_E_INVALID_VALUE
    case .forked: return MC_E_FORKED
    case .bufferTooSmall: return MC_E_BUFFER_TOO_SMALL
    }
  }

  var description: String {
    switch self {
    case .invalidArgument(let why): return "invalid argument: \(why)"
    case .closed(let what): return "\(what) is closed or was never opened; open the cache again"
    case .noMemory(let why): return "out of memory: \(why)"
    case .invalidKey(let why): return "invalid key: \(why)"
    case .invalidValue(let why): return "invalid value: \(why)"
    case .forked(let why): return why
    case .bufferTooSmall(let needed, let capacity):
      return "the value has \(needed) bytes, more than the buffer's \(capacity); read it again with a larger buffer"
    }
  }
}

extension CacheError {
  /// The C status code of each case (mappedcache.h).
  var status: Int32 {
    switch self {
    case .notACacheFile: return MC_E_NOT_A_CACHE_FILE
    case .incompatibleFormat: return MC_E_INCOMPATIBLE_FORMAT
    case .typeMismatch: return MC_E_TYPE_MISMATCH
    case .emptyKey: return MC_E_EMPTY_KEY
    case .keyTooLarge: return MC_E_KEY_TOO_LARGE
    case .valueTooLarge: return MC_E_VALUE_TOO_LARGE
    case .decodingFailed: return MC_E_DECODING_FAILED
    case .encodingFailed: return MC_E_ENCODING_FAILED
    case .corrupted: return MC_E_CORRUPTED
    case .readOnly: return MC_E_READ_ONLY
    case .unsafeFile: return MC_E_UNSAFE_FILE
    case .fileReplaced: return MC_E_FILE_REPLACED
    case .diskFull: return MC_E_DISK_FULL
    case .tooManyProcesses: return MC_E_TOO_MANY_PROCESSES
    case .invalidArgument: return MC_E_INVALID_ARGUMENT
    case .notAnInteger: return MC_E_NOT_AN_INTEGER
    case .timedOut: return MC_E_TIMED_OUT
    case .computeFailed: return MC_E_COMPUTE_FAILED
    case .system: return MC_E_SYSTEM
    case .protocolViolation, .remoteUnavailable, .remoteError: return MC_E_OTHER
    }
  }
}

/// Records `error` as this thread's last error (its message, and errno for a failed
/// system call) and returns its status code.
func failure(_ error: Error) -> Int32 {
  let status: Int32
  var errnum: Int32 = 0
  switch error {
  case let e as ABIError: status = e.status
  case let e as CacheError:
    status = e.status
    if case .system(let s) = e { errnum = s.errno }
  default: status = MC_E_OTHER
  }
  var message = String(describing: error)
  message.withUTF8 { mc_abi_set_error($0.baseAddress, $0.count, errnum) }
  return status
}

/// Runs `body`, turning a thrown error into its status code (and this thread's last error).
@inline(__always)
func guarded(_ body: () throws -> Int32) -> Int32 {
  do { return try body() } catch { return failure(error) }
}

/// UTF-8 validation for keys (always) and for a cache of strings' values. ASCII, the
/// common case, is checked 8 bytes at a time; anything else by the standard library.
enum UTF8Check {
  @inline(__always)
  static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool { isASCII(bytes) || slow(bytes) }

  /// Whether every byte is ASCII (what the hot reads accept without a call; a key that
  /// is other UTF-8 takes the full path).
  @inline(__always)
  static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
    // Every byte's high bit, ORed, from loads that may overlap (a byte read twice changes
    // no OR): 8 to 16 bytes as the first and the last 8, more as the words before the
    // last and the last 8; 4 to 7 bytes as two 4-byte loads; 1 to 3 as the first, middle
    // and last bytes.
    let n = bytes.count
    guard let p = bytes.baseAddress else { return true }
    var high: UInt64
    if n >= 8 {
      high = p.loadUnaligned(fromByteOffset: n &- 8, as: UInt64.self)
      if n <= 16 { return (high | p.loadUnaligned(as: UInt64.self)) & 0x8080_8080_8080_8080 == 0 }
      var i = 0
      while i &+ 8 < n {
        high |= p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        i &+= 8
      }
    } else if n >= 4 {
      high = UInt64(p.loadUnaligned(as: UInt32.self) | p.loadUnaligned(fromByteOffset: n &- 4, as: UInt32.self))
    } else if n > 0 {
      high = UInt64(p.load(as: UInt8.self) | p.load(fromByteOffset: n >> 1, as: UInt8.self))
      high |= UInt64(p.load(fromByteOffset: n &- 1, as: UInt8.self))
    } else {
      return true
    }
    return high & 0x8080_8080_8080_8080 == 0
  }

  @inline(never)
  private static func slow(_ bytes: UnsafeRawBufferPointer) -> Bool {
    String(validating: bytes, as: UTF8.self) != nil
  }
}
