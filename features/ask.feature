@ask
Feature: Conversation — ASK / ANSWER with gateway-enforced expiry (SPEC §7)

  Asks are deliberately not durable: only their terminal outcome matters, and each gateway
  enforces expiry itself, whatever the broker did.

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the wire to "lead" and "w1" is tapped
    And the probe watches the wire

  @ASK-1 @ASK-2 @ENV-3 @RPL-2 @smoke
  Scenario: a question asked in turn is answered, and the whole flow shares one traceId
    Given "lead" is waiting for a message
    When "w1" asks "which branch should I rebase on?" with a timeout of 30 seconds
    Then the wait returns an ASK from "w1" with text "which branch should I rebase on?" within 10 seconds
    When "lead" answers the question with "main, please"
    Then the answer returns "sent"
    And the ask returns "answered" with answer "main, please" within 10 seconds
    And every message of the conversation between "lead" and "w1" carries one traceId
    And the ASK to "lead" expires 30 seconds after its ts
    And the ANSWER to "w1" carries the expiresAt of its ASK to "lead"
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @ASK-1 @ASK-2 @RPL-2
  Scenario: a question that ends a send's wait for the reply carries the turnId the main answers with
    Given "w1" is idle
    When "lead" sends "pick the release branch" to "w1" and waits for the reply
    Then herdr on "b" received exactly 1 input of "pick the release branch" into "w1"
    When "w1" asks "release/2.4 or main?" with a timeout of 30 seconds
    Then the send returns "injected" with question "release/2.4 or main?" within 10 seconds
    When "lead" answers the question with "release/2.4"
    Then the answer returns "sent"
    And the ask returns "answered" with answer "release/2.4" within 10 seconds

  @ASK-2 @ENV-3
  Scenario: with no open waiter the ask is refused in one round trip
    When "w1" asks "anyone there?" with a timeout of 60 seconds
    Then the ask returns "no_waiter" within 5 seconds
    And the wire carries a NO_WAITER to "w1" within 5 seconds
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @ASK-5 @ASK-3 @ENV-3
  Scenario: an ask that expires at the asker is abandoned, and a later answer is refused
    Given "lead" is waiting for a message
    When "w1" asks "should I squash?" with a timeout of 2 seconds
    Then the wait returns an ASK from "w1" with text "should I squash?" within 10 seconds
    And the ask returns "expired" within 10 seconds
    And the wire carries an ABANDONED to "lead" for the question within 5 seconds
    And within 10 seconds the broker shows 2 messages to "lead" acked, with nothing ready or unacknowledged
    When "lead" answers the question with "yes"
    Then the answer returns "abandoned"
    And no ANSWER reached "w1"
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @ASK-4 @ENV-3
  Scenario: an answer for a turn that no longer waits comes back to the main as TOO_LATE
    Given "lead" is waiting for a message
    When "w1" asks "tabs or spaces?" with a timeout of 2 seconds
    Then the wait returns an ASK from "w1" with text "tabs or spaces?" within 10 seconds
    And the ask returns "expired" within 10 seconds
    When an ANSWER "spaces" signed by host "a" as "lead" reaches "w1" for the question
    Then "lead" drains a TOO_LATE notice for the question within 10 seconds

  @ASK-4 @ENV-3
  Scenario: a late answer to an earlier turn never answers the turn that waits now
    Given "lead" is waiting for a message
    When "w1" asks "tabs or spaces?" with a timeout of 2 seconds
    Then the wait returns an ASK from "w1" with text "tabs or spaces?" within 10 seconds
    And the ask returns "expired" within 10 seconds
    Given "lead" is waiting for a message
    When "w1" asks "which linter?" with a timeout of 30 seconds
    Then the wait returns an ASK from "w1" with text "which linter?" within 10 seconds
    When an ANSWER "spaces" signed by host "a" as "lead" reaches "w1" for the first question
    Then "lead" drains a TOO_LATE notice for the first question within 10 seconds
    When "lead" answers the question with "clippy"
    Then the answer returns "sent"
    And the ask returns "answered" with answer "clippy" within 10 seconds

  @ASK-3 @crash
  Scenario: an ASK that expired while the main's gateway was down is never surfaced
    When the gateway on "a" is killed with SIGKILL
    And "w1" asks "still there?" with a timeout of 2 seconds
    Then the ask returns "expired" within 10 seconds
    When the gateway on "a" is restarted
    Then the inbox of "lead" holds no message within 10 seconds
    When "lead" polls all messages
    Then "lead" gets no message
