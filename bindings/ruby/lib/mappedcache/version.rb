# frozen_string_literal: true

module MappedCache
  VERSION = "0.8.0"
end
