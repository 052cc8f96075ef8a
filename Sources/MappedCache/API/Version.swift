/// The package's version and the file format it reads and writes, for `--version` texts,
/// logs and support requests.
public enum MappedCacheVersion {
  /// The package's semantic version (CHANGELOG.md lists what each one changed).
  public static let library = "0.8.0"

  /// The file format this build creates and the only one it opens: a file of another
  /// format version is refused with `CacheError.incompatibleFormat` (README,
  /// "Compatibility").
  public static let fileFormat = Int(Format.version)
}
