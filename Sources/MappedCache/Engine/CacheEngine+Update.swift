/// Read-modify-write of one entry under the write lock: the building block of
/// `increment`/`decrement` and other updates that must be atomic across processes.
///
/// Under `withWriteLock` (which repairs first after a dead writer):
///  1. find the key's slot; an expired entry, or one whose checksum fails, counts as absent;
///  2. hand the current value bytes (a view into the mapping, valid only during the
///     closure: the lock keeps them from changing) and its info to the closure;
///  3. apply the closure's answer: keep, remove, or store new bytes through the ordinary
///     write protocol (`storeLocked`), so crash safety is the same as for `set`.
/// The closure runs while the lock is held: it must be short and must not touch the cache.
extension CacheEngine {
  enum UpdateAction {
    /// Leave the entry as it is.
    case keep
    /// Remove the entry (nothing happens when it is absent).
    case remove
    /// Store these bytes with this expiry (absolute ms, 0 = never).
    case store([UInt8], expiry: UInt64)
  }

  enum UpdateOutcome: Equatable {
    case kept
    case removed
    case stored(version: UInt64)
  }

  func update(_ key: UnsafeRawBufferPointer,
              _ body: (_ current: UnsafeRawBufferPointer?, _ info: EntryInfo?) throws -> UpdateAction) throws -> UpdateOutcome {
    try checkKey(key)
    let hash = KeyHash.key(key)
    return try withWriteLock {
      let now = Sys.expiryClockMilliseconds()
      var slot: Int? = nil
      var action: UpdateAction
      if case .found(let i, let loc, let rh) = find(key, hash: hash), !isExpired(slotMeta(i), now: now) {
        let bytes = foundValue(slot: i, loc: loc, rh)
        if KeyHash.checksum(bytes, hash: hash) == rh.sum {
          slot = i
          let expiry = slotMeta(i) & Format.expiryMask
          let info = EntryInfo(valueCount: rh.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry,
                               version: rh.cas, isExpired: false)
          action = try body(bytes, info)
        } else {
          action = try body(nil, nil)
        }
      } else {
        action = try body(nil, nil)
      }
      switch action {
      case .keep:
        return .kept
      case .remove:
        if let i = slot {
          removeSlot(i)
          bump(Format.H.removes)
        }
        return .removed
      case .store(let value, let expiry):
        let outcome = try value.withUnsafeBytes { v in
          let w = try prepare(key, v, expiry: expiry)
          return try storeLocked(key, v, w, condition: .always, now: now)
        }
        guard case .stored(let version) = outcome else {
          throw CacheError.corrupted(path: path, reason: "an unconditional store under the lock did not store")
        }
        return .stored(version: version)
      }
    }
  }
}
