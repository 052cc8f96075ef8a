/// How `open` treats files it did not create itself.
///
/// By default a cache file must be a regular file, owned by this process's user and
/// writable by no one else: a file another user planted, or one that others may
/// change, could feed this process data it did not expect. To share a cache between
/// users (a web server and a job runner, say), put them in one group and name it with
/// `sharedWithGroup(_:)`, rather than turning the checks off with
/// `allowOtherOwner` and `allowGroupOrWorldWritable`.
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
  /// The group the file is shared with (a group name, or a numeric group ID when no
  /// group has that name), or nil. A file that belongs to this group is accepted even
  /// when another user owns it or the group may write it: only the group's members
  /// (and root) can give a file to a group, so its writers are the owner and the
  /// members, whom naming the group trusts. Still refused: a file that others (neither
  /// the owner nor the group) may write, and a group-writable file of any other group.
  /// A file created under this policy is given to the group, with the group's
  /// permission bits of `CacheOptions.mode` (read and write when the mode gives the
  /// group none) applied as given rather than through the umask, and never write
  /// permission for others. Creating one needs membership of the group (or root); opening one does
  /// not, but a process that may not write the file gets it read-only. An unknown
  /// group is `CacheError.invalidArgument`.
  public var sharedGroup: String? = nil
  /// Whether a `SharedCache` keeps decoded values in this process, checked against the
  /// file on every read (see `DecodedValueCaching`). Default `.automatic`: on for
  /// values stored through the binary `Codable` coder.
  public var decodedValues: DecodedValueCaching = .automatic

  /// A policy; the defaults are the safe choices (see each property).
  public init(
    allowOtherOwner: Bool = false, allowGroupOrWorldWritable: Bool = false,
    readOnly: Bool = false, create: Bool = true, verifyChecksumsOnRead: Bool = false,
    sharedGroup: String? = nil, decodedValues: DecodedValueCaching = .automatic
  ) {
    self.decodedValues = decodedValues
    self.allowOtherOwner = allowOtherOwner
    self.allowGroupOrWorldWritable = allowGroupOrWorldWritable
    self.readOnly = readOnly
    self.create = create
    self.verifyChecksumsOnRead = verifyChecksumsOnRead
    self.sharedGroup = sharedGroup
  }

  /// The default checks, except that a file belonging to `group` (by name) may be owned
  /// by another user and writable by the group: see `sharedGroup`.
  ///
  /// ```swift
  /// // Both the web server's user and the job runner's user are members of "cache".
  /// let cache = try SharedCache<Data>(path: "/dev/shm/shared.mcache", policy: .sharedWithGroup("cache"))
  /// ```
  public static func sharedWithGroup(_ group: String) -> OpenPolicy {
    OpenPolicy(sharedGroup: group)
  }
}
