import Synchronization

/// A small Codable record (five fields, as `mc-test-helper bench-typed`'s) whose counter
/// a writer only ever raises, shared by the decoded-value cache's helper processes and
/// tests. Decoding bumps `decodes`, so a test can tell a kept value from a decoded one.
public struct CountedRecord: Codable, Equatable, Sendable {
  public var key: String
  public var counter: Int
  public var score: Double
  public var tags: [String]
  public var active: Bool

  /// Values decoded in this process, by any thread.
  public static let decodes = Atomic<Int>(0)

  public init(key: String, counter: Int, tags: [String] = ["red", "green"]) {
    self.key = key
    self.counter = counter
    self.score = Double(counter) / 4
    self.tags = tags
    self.active = counter % 2 == 0
  }

  enum CodingKeys: String, CodingKey { case key, counter, score, tags, active }

  public init(from decoder: Decoder) throws {
    let c = try decoder.container(keyedBy: CodingKeys.self)
    key = try c.decode(String.self, forKey: .key)
    counter = try c.decode(Int.self, forKey: .counter)
    score = try c.decode(Double.self, forKey: .score)
    tags = try c.decode([String].self, forKey: .tags)
    active = try c.decode(Bool.self, forKey: .active)
    Self.decodes.add(1, ordering: .relaxed)
  }

  /// Whether this is a whole record some writer made for `key` (its fields agree).
  public func isWhole(for key: String) -> Bool {
    self.key == key && score == Double(counter) / 4 && active == (counter % 2 == 0)
  }
}
