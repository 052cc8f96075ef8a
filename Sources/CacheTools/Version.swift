import MappedCache

/// The line both tools print for `--version`: the tool, the package's version and the
/// file format it reads and writes, all from `MappedCacheVersion`.
public enum ToolVersion {
  /// "mapped-cache 0.8.0 (file format 4)".
  public static func line(tool: String) -> String {
    "\(tool) \(MappedCacheVersion.library) (file format \(MappedCacheVersion.fileFormat))"
  }
}
