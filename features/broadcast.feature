@broadcast
Feature: Broadcast — one publish, one copy per member (SPEC §10)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead" in group "build"
    And host "c" runs a gateway with a worker "w2" whose parent is "lead" in group "build"
    And host "c" also runs a worker "w3" whose parent is "lead"

  @BRD-1 @BRD-2 @FWD-3 @smoke
  Scenario: a group broadcast reaches each member once, and no one else
    Given "w1", "w2" and "w3" are idle
    And the probe watches the wire
    When "lead" broadcasts "rebase on main" to group "build"
    Then herdr on "b" records exactly 1 inject into "w1" with text "rebase on main"
    And herdr on "c" records exactly 1 inject into "w2" with text "rebase on main"
    And the inbox of "w3" never received a message
    And the inbox of "lead" never received a message
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @BRD-1 @BRD-2
  Scenario: a broadcast to everyone reaches every other entity once, and not its sender
    Given host "c" also runs a main "m2"
    And "w1", "w2" and "w3" are idle
    When "lead" broadcasts "freeze merges" to everyone
    Then herdr on "b" records exactly 1 inject into "w1" with text "freeze merges"
    And herdr on "c" records exactly 1 inject into "w2" with text "freeze merges"
    And herdr on "c" records exactly 1 inject into "w3" with text "freeze merges"
    And within 10 seconds the inbox of "m2" holds 0 ready and 1 unacknowledged message
    When "m2" polls all messages
    Then "m2" gets exactly 1 message
    And message 1 is a BROADCAST from "lead" with text "freeze merges"
    And the broker shows "lead"'s own copy delivered and dropped

  @BRD-1
  Scenario: a broadcast to an empty group is legal silence
    When "lead" broadcasts "anyone?" to group "nobody-here"
    Then the inbox of "w1" never received a message

  @BRD-2
  Scenario: a worker's own broadcast is not injected back into it
    Given "w1" and "w2" are idle
    And the probe watches the wire
    When a BROADCAST "who owns the cache?" from "w1" to group "build", signed by its host, reaches the broker
    Then herdr on "c" records exactly 1 inject into "w2" with text "who owns the cache?"
    And herdr on "b" records no inject into "w1"

  @BRD-3
  Scenario: a stopped member gets nothing
    Given "w1" and "w2" are idle
    When "w2" is stopped through the local API of "c"
    And "lead" broadcasts "cut the release" to group "build"
    Then herdr on "b" records exactly 1 inject into "w1" with text "cut the release"
    And no queue holds a copy of the broadcast for "w2" over a window
    And herdr on "c" records no inject into "w2"

  @BRD-2
  Scenario: a broadcast larger than the broker's frame size arrives intact at every member
    Given "w1" and "w2" are idle
    When "lead" broadcasts a 300 KiB text to group "build"
    Then herdr on "b" records the large text intact in "w1"
    And herdr on "c" records the large text intact in "w2"
