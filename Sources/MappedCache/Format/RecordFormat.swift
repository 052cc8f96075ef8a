/// A record in a log: a header, the key, the value, at any byte offset (no alignment, no
/// padding), never crossing its log's limit. Pure arithmetic on lengths and flags:
/// `MappedMemory` reads and writes the bytes.
///
///     0 flags u8    bits 0..1 kind (`kindEntry`, `kindWrap`); bit 2 has expiry;
///                   bit 3 unearned; bits 4..5 length form; bit 6 free-listed
///                   (a dead record on its main log's free list, `FreeLists`); bit 7 zero
///     1 lengths     form 0: klen−1 u8, vlen u8 · form 1: klen−1 u8, vlen u16
///                   form 2: klen−1 u16, vlen u32
///       version u32 the partition's version counter at the write
///       sum u16     `KeyHash.checksum` of the value
///      [expiry u48] bits 0..41 ms since 1970, bits 42..47 the horizon (`Expiry`)
///       key, value
///
/// A wrap marker is the flags byte alone: the log goes on at its base (`RecordLogs`).
enum RecordFormat {
  static let kindEntry: UInt8 = 0
  static let kindWrap: UInt8 = 1
  static let kindMask: UInt8 = 0b11
  static let expiryFlag: UInt8 = 1 << 2
  /// An entry promoted to main without having been read (while the cache filled).
  static let unearnedFlag: UInt8 = 1 << 3
  static let formShift: UInt8 = 4
  static let formMask: UInt8 = 0b11 << 4
  /// A dead record on its main log's free list (`FreeLists`): its key is one byte, its
  /// value starts with the list's links. No slot names a record with this flag.
  static let listedFlag: UInt8 = 1 << 6
  /// Bits that are zero in every valid flags byte (and form 3, unused).
  static let invalidFlags: UInt8 = 0b1000_0000
  static let wrapMarker: UInt8 = kindWrap

  static let versionBytes = 4
  static let sumBytes = 2
  static let expiryBytes = 6
  /// The largest header: flags, form 2's lengths, version, sum, expiry.
  static let maxHeaderBytes = 1 + 6 + versionBytes + sumBytes + expiryBytes

  /// Expiry milliseconds a record can hold (until the year 2109); later ones are stored
  /// as this.
  static let expiryMillisecondsMask: UInt64 = (1 << 42) - 1

  /// The length form for a key and value of these sizes (key sizes are 1 to 4096).
  @inline(__always)
  static func form(keyCount: Int, valueCount: Int) -> UInt8 {
    if keyCount <= 256 {
      if valueCount <= 0xFF { return 0 }
      if valueCount <= 0xFFFF { return 1 }
    }
    return 2
  }

  /// Bytes of a form's lengths.
  @inline(__always)
  static func lengthBytes(form: UInt8) -> Int { form == 0 ? 2 : form == 1 ? 3 : 6 }

  /// Bytes of a header of this form, with or without an expiry.
  @inline(__always)
  static func headerBytes(form: UInt8, expiry: Bool) -> Int {
    1 &+ lengthBytes(form: form) &+ versionBytes &+ sumBytes &+ (expiry ? expiryBytes : 0)
  }

  /// The header of form 0 without an expiry: flags, two lengths, version, sum.
  static let shortHeaderBytes = 1 + 2 + versionBytes + sumBytes
  /// The longest record of that header: a 256-byte key and a 255-byte value.
  static let maxShortRecord = shortHeaderBytes + 256 + 0xFF

  /// A whole record's bytes. Precondition: both counts are at most 2^40 (every
  /// caller's are: checked against the limits, or fields of a header), so the sum
  /// cannot overflow.
  @inline(__always)
  static func size(keyCount: Int, valueCount: Int, expiry: Bool) -> Int {
    headerBytes(form: form(keyCount: keyCount, valueCount: valueCount), expiry: expiry) &+ keyCount &+ valueCount
  }

  /// The form and value length of a dead record of exactly `size` bytes with a key of
  /// `keyCount` bytes and no expiry (the rest of a record rewritten smaller in place,
  /// `MappedMemory.rewriteRecord`), or nil when no record is that small or that large.
  static func filler(size: Int, keyCount: Int) -> (form: UInt8, valueCount: Int)? {
    let keyed = size &- keyCount
    if keyCount <= 256 {
      let v0 = keyed &- headerBytes(form: 0, expiry: false)
      if v0 >= 0 && v0 <= 0xFF { return (0, v0) }
      let v1 = keyed &- headerBytes(form: 1, expiry: false)
      if v1 > 0xFF && v1 <= 0xFFFF { return (1, v1) }
    }
    let v2 = keyed &- headerBytes(form: 2, expiry: false)
    return v2 >= 0 && v2 <= 0xFFFF_FFFF ? (2, v2) : nil
  }

  /// The length form a flags byte names.
  @inline(__always)
  static func form(ofFlags flags: UInt8) -> UInt8 { (flags & formMask) >> formShift }

  /// The flags byte of an entry record.
  @inline(__always)
  static func flags(keyCount: Int, valueCount: Int, expiry: Bool, unearned: Bool = false) -> UInt8 {
    form(keyCount: keyCount, valueCount: valueCount) << formShift | (expiry ? expiryFlag : 0)
      | (unearned ? unearnedFlag : 0)
  }

  /// The 48 bits a record stores for an expiry word (`Expiry`: ms in bits 0..47, the
  /// horizon in 48..53); 0 for none.
  @inline(__always)
  static func storedExpiry(_ expiry: UInt64) -> UInt64 {
    let ms = min(expiry & Format.expiryMask, expiryMillisecondsMask)
    return ms | ((expiry >> 48) & 0x3F) << 42
  }

  /// The expiry word for 48 stored bits.
  @inline(__always)
  static func expiryWord(stored: UInt64) -> UInt64 {
    (stored & expiryMillisecondsMask) | ((stored >> 42) & 0x3F) << 48
  }

  /// What a record's header says, once its bytes were checked (`MappedMemory.record(at:)`).
  struct Header {
    var flags: UInt8
    var klen: Int
    var vlen: Int
    var version: UInt32
    var sum: UInt16
    /// The expiry word (`Expiry`), 0 for none.
    var expiry: UInt64
    /// Bytes before the key.
    var headerBytes: Int
    /// The whole record.
    @inline(__always) var size: Int { headerBytes &+ klen &+ vlen }
    /// Key and value bytes, as counted in `liveBytes`.
    @inline(__always) var liveBytes: Int { klen &+ vlen }
    @inline(__always) var hasExpiry: Bool { flags & RecordFormat.expiryFlag != 0 }
    @inline(__always) var unearned: Bool { flags & RecordFormat.unearnedFlag != 0 }
    /// A dead record on its main log's free list (`FreeLists`).
    @inline(__always) var isListed: Bool { flags & RecordFormat.listedFlag != 0 }
    @inline(__always) var form: UInt8 { RecordFormat.form(ofFlags: flags) }
  }

  /// An entry record's contents as a write lays them down: its key's and its value's
  /// bytes (views, valid for the call they are handed to), and its header's version, the
  /// value's checksum and the expiry word (`Expiry`; 0: none, and a record written anew
  /// then has no expiry field).
  struct Content {
    let key: UnsafeRawBufferPointer
    let value: UnsafeRawBufferPointer
    var version: UInt32 = 0
    let sum: UInt16
    let expiry: UInt64
  }

  /// What a header holds after its lengths: the version, the value's checksum and, for a
  /// header with an expiry field, the expiry word.
  typealias Trailer = (version: UInt32, sum: UInt16, expiry: UInt64?)
}
