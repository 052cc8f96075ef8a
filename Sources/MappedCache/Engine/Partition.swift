/// One partition's layers, wired together for one operation: its memory, index, logs,
/// counters, index resizer and eviction. A value of a few words, made where it is needed
/// (`CacheEngine.partition(_:)`), holding nothing that outlives the mapping.
struct Partition {
  let memory: PartitionMemory
  let index: BucketIndex
  let logs: RecordLogs
  let counters: PartitionCounters
  let resizer: IndexResizer
  let policy: EvictionPolicy

  @inline(__always)
  init(_ p: Int, file: MappedMemory, layout: Layout) {
    memory = file.partition(p)
    index = BucketIndex(part: memory)
    logs = RecordLogs(part: memory, layout: layout)
    counters = PartitionCounters(part: memory, memory: file)
    resizer = IndexResizer(index: index, logs: logs, counters: counters, layout: layout)
    policy = EvictionPolicy(
      index: index, logs: logs, counters: counters, ghost: GhostTable(index: index), resizer: resizer,
      smallBytes: layout.smallBytes, maxRecord: layout.maxRecord, partitionCount: layout.partitionCount)
  }

  /// The partition's number.
  @inline(__always) var number: Int { memory.index }

  /// Whether the group count is in range and the index starts at or above the main
  /// log's limit: what a writer needs before it computes a bucket's address from the
  /// geometry (checked under the lock, W1; a damaged word sends the writer to repair).
  var geometryIsSane: Bool {
    let groups = index.groups
    guard memory.isValidGroupCount(groups) else { return false }
    return logs.mainLimit <= memory.limits.bytes - groups * Format.groupBytes
  }
}
