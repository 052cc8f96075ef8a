/// How `open` treats files it did not create itself.
public struct OpenPolicy: Sendable, Equatable {
  /// Accept a file owned by another user.
  public var allowOtherOwner = false
  /// Accept a file that group or others can write.
  public var allowGroupOrWorldWritable = false
  /// Open for reads only, even when the file is writable.
  public var readOnly = false
  /// Create the file when it does not exist.
  public var create = true
  /// Check each value's checksum on every read, answering "miss" for a value whose
  /// bytes no longer match it. Off by default: the seqlock and the key comparison
  /// already prove that a value was written whole, for its key, by a set; a checksum
  /// also catches bytes changed by something other than the cache's writers (a stray
  /// store into the mapping), at the price of a second pass over the value. `verify`
  /// always checks every checksum, and `CacheFile` (the tools' API, used by
  /// `mapped-cache`) reads with this on by default.
  public var verifyChecksumsOnRead = false

  public init(allowOtherOwner: Bool = false, allowGroupOrWorldWritable: Bool = false,
              readOnly: Bool = false, create: Bool = true, verifyChecksumsOnRead: Bool = false) {
    self.allowOtherOwner = allowOtherOwner
    self.allowGroupOrWorldWritable = allowGroupOrWorldWritable
    self.readOnly = readOnly
    self.create = create
    self.verifyChecksumsOnRead = verifyChecksumsOnRead
  }
}
