@pull-path
Feature: Pull path — messages for a main are held until drained, at least once (SPEC §6)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @RPL-1 @smoke
  Scenario: a reply is held unacked until the main drains it, then acked
    When "w1" replies "done: 3 files changed"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w1" with text "done: 3 files changed"
    And the inbox of "lead" holds no message within 10 seconds
    When "lead" polls all messages
    Then "lead" gets no message

  @RPL-4 @RPL-1
  Scenario: polling by sender drains only that sender's messages, each once
    Given host "b" also runs a worker "w2" whose parent is "lead"
    When "w1" replies "from one"
    And "w2" replies "from two"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 2 unacknowledged messages
    When "lead" polls messages from "w2"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w2" with text "from two"
    When "lead" polls messages from "w2"
    Then "lead" gets no message
    When "lead" polls messages from "w1"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w1" with text "from one"

  @RPL-2
  Scenario: an open bridge_wait takes the reply the moment it arrives
    Given "lead" is waiting for a message
    When "w1" replies "ready for review"
    Then the wait returns a REPLY from "w1" with text "ready for review" within 10 seconds
    And the inbox of "lead" holds no message within 10 seconds

  @RPL-2 @FWD-3
  Scenario: a send that waits for the reply gets the worker's reply
    Given "w1" is idle
    When "lead" sends "summarize the diff" to "w1" and waits for the reply
    Then herdr on "b" records exactly 1 inject into "w1" with text "summarize the diff"
    When "w1" replies "summary: two renames"
    Then the send returns "injected" with reply "summary: two renames" within 10 seconds
    And the inbox of "lead" holds no message within 10 seconds

  @RPL-2 @RPL-4
  Scenario: a send that waits for its worker's reply is not resolved by another worker's reply, which stays held for a poll
    Given host "b" also runs a worker "w2" whose parent is "lead"
    And "w1" is idle
    When "lead" sends "summarize the diff" to "w1" and waits for the reply
    Then herdr on "b" records exactly 1 inject into "w1" with text "summarize the diff"
    When "w2" replies "unrelated: tests are green"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When "w1" replies "summary: two renames"
    Then the send returns "injected" with reply "summary: two renames" within 10 seconds
    When "lead" polls messages from "w2"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w2" with text "unrelated: tests are green"

  @RPL-1 @FWD-6
  Scenario: copies of a message that arrive while it is held, handed to a waiter or being drained are never drained again
    Given the probe watches the wire
    And the probe announces "p1" on host "probe"
    When "p1" on the probe host sends 40 messages to "lead", each published twice in a row, while it drains
    Then "lead" drained each of those messages exactly once
