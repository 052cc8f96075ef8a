# frozen_string_literal: true

# Runs every test of the gem in one process (the installed gem's: put it on GEM_PATH).
Dir[File.join(__dir__, "*_test.rb")].sort.each { |f| require f }
