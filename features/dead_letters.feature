@dead-letters
Feature: Caps, expiry and dead letters — nothing vanishes (SPEC §11)

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds

  @CAP-2 @CAP-4 @TOP-4 @FWD-5 @classic-inbox
  Scenario: overflow dead-letters the oldest briefs, reported to the sender as FAILED maxlen; the rest land once or are busy ([C-12])
    Given inboxes hold at most 3 messages
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    When the gateway on "b" is killed with SIGKILL
    And "lead" sends 5 briefs "job-1" to "job-5" to "w1", one after another
    Then sends 1 and 2 return "failed" with reason "maxlen" within the inject bound
    And sends 3, 4 and 5 return "inject_timeout" within the inject bound
    # The rest reach "b" after their senders' bound: [C-12] gives each one look at the gate.
    When the gateway on "b" is restarted
    Then briefs 3, 4 and 5 each land once in "w1" on "b" or come back to "lead" as FAILED busy
    And herdr on "b" records no inject into "w1" with text "job-1"
    And herdr on "b" records no inject into "w1" with text "job-2"

  @CAP-2 @CAP-4
  Scenario: a brief that outlives its queue ttl is reported to the sender as FAILED expired
    Given host "b" uses an inbox ttl of 1500 ms
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the gateway on "b" is killed with SIGKILL
    And "lead" sends "rotate the keys" to "w1"
    Then the send returns "failed" with reason "expired" within the inject bound

  @CAP-5 @TOP-4
  Scenario: the dead-letter queue is itself capped
    Given the dead-letter queue holds at most 5 messages
    And host "a" runs a gateway with a main "lead"
    And dead letters are watched
    When 15 messages are dead-lettered while no gateway runs
    Then the dead-letter queue never holds more than 5 messages

  @CAP-3 @RPL-5
  Scenario: an abandoned sender's expired backlog does not wedge another sender's reply
    Given host "a" uses a prefetch of 2
    # Long enough for a held message to show as unacknowledged before it expires, also on a
    # quorum inbox, whose depths the management API shows once a tick (SPEC §16).
    And host "b" uses an inbox ttl of 4000 ms
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And host "c" runs a gateway with a worker "w2" whose parent is "lead"
    When "w1" replies "stale one"
    And "w1" replies "stale two"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 2 unacknowledged messages
    When "w2" replies "fresh"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When "lead" polls messages from "w2"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w2" with text "fresh"

  @CAP-1 @RPL-5
  Scenario: a main that does not drain keeps its backlog on the queue, beyond the prefetch bound
    Given host "a" uses a prefetch of 2
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When "w1" sends 6 replies
    Then the inbox of "lead" holds 6 messages, at most 2 of them unacknowledged, over a window
