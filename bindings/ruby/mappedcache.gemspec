# frozen_string_literal: true

require "fileutils"
require_relative "lib/mappedcache/version"

# `gem build` from a checkout carries a copy of the C ABI's header (the installed gem
# compiles against it) and the checkout's path (extconf.rb builds the library there when
# MAPPEDCACHE_LIB_DIR is not set and the checkout is still present).
checkout = File.expand_path("../..", __dir__)
header = File.join(checkout, "Sources", "CMappedCacheABI", "include", "mappedcache.h")
if File.exist?(header)
  FileUtils.mkdir_p(File.join(__dir__, "ext", "mappedcache", "include"))
  File.write(File.join(__dir__, "ext", "mappedcache", "include", "mappedcache.h"), File.read(header))
  File.write(File.join(__dir__, "ext", "mappedcache", "checkout.txt"), "#{checkout}\n")
end

Gem::Specification.new do |s|
  s.name = "mappedcache"
  s.version = MappedCache::VERSION
  s.summary = "A cache shared by every process of a host through one memory-mapped file"
  s.description = <<~TEXT
    Ruby bindings for MappedCache (libmappedcache's C ABI): lock-free, syscall-free reads of
    a cache that Ruby, Python, Swift and C processes share through one file, with counters,
    compare-and-swap and get-or-compute once across processes, and a Rails cache store
    (ActiveSupport::Cache::MappedCacheStore).
  TEXT
  s.authors = ["MappedCache contributors"]
  s.required_ruby_version = ">= 3.1"
  s.files = Dir.chdir(__dir__) do
    Dir["lib/**/*.rb", "ext/mappedcache/*.{c,rb,txt}", "ext/mappedcache/include/*.h", "README.md"]
  end
  s.extensions = ["ext/mappedcache/extconf.rb"]
  s.require_paths = ["lib"]
end
