import SystemCalls

/// What identifies one write of one entry: its version (the partition's version
/// counter, taken under the partition's lock by every write of any key there), with the
/// value's length and checksum. A process-local cache of decoded values
/// (`DecodedValueCache`) keeps the stamp of the bytes it decoded; on every read it reads
/// the key's live entry's stamp from the file and returns a kept value only if the
/// stamps are equal.
///
/// Why equal stamps mean equal bytes (no ABA): every store of a value, by any process,
/// takes a new version from its partition's counter under the lock
/// (`PartitionCounters.nextVersion`: `Writer.store`, an in-place rewrite), and the
/// counter only moves forwards (nothing resets it: not `removeAll`, not repair, not
/// eviction). A record keeps its low 32 bits: a key's version repeats only after 2^32
/// writes to its partition, and then length and checksum must match too. Moves by
/// eviction copy a record whole, version and bytes together, and `touch` changes only the
/// expiry, read afresh on every hit. The bucket's own `seq` would not do: an entry moves
/// between buckets, and a remove and a re-add can leave a slot with a sequence value
/// seen before.
@usableFromInline
struct EntryStamp: Equatable, Sendable {
  @usableFromInline var version: UInt64
  /// The value's length (low 32 bits) and checksum (high 32). One word, so that the
  /// stamp is stored and loaded as two 8-byte words: stored as 8 + 4 + 4 bytes and
  /// loaded as 8 + 8 (as the compiler did with three fields), the second load cannot be
  /// forwarded from the two stores and waits for them to reach the cache, some 15
  /// cycles on every hot typed read.
  @usableFromInline var lengthAndSum: UInt64

  @usableFromInline init(version: UInt64, count: UInt32, sum: UInt32) {
    self.version = version
    self.lengthAndSum = UInt64(count) | UInt64(sum) << 32
  }

  /// The value's length in bytes.
  @usableFromInline var count: UInt32 { UInt32(truncatingIfNeeded: lengthAndSum) }
  /// The value's checksum.
  @usableFromInline var sum: UInt32 { UInt32(truncatingIfNeeded: lengthAndSum >> 32) }

  /// No write (versions start at 1): kept values never carry it.
  @usableFromInline static let none = EntryStamp(version: 0, count: 0, sum: 0)

  init(_ h: RecordFormat.Header) {
    self.init(version: UInt64(h.version), count: UInt32(truncatingIfNeeded: h.vlen), sum: UInt32(h.sum))
  }
}
