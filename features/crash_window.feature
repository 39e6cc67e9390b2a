@crash-window
Feature: Crash windows — at most once into workers, at least once into mains (SPEC §5, §6)

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @FWD-1 @FWD-5 @crash
  Scenario: a crash between ack and inject costs a visible failure, never a late or second inject
    Given "w1" is working
    When "lead" sends "migrate the schema" to "w1"
    Then within 5 seconds the broker shows the brief to "w1" acked, with nothing ready or unacknowledged
    When the gateway on "b" is killed with SIGKILL
    And the gateway on "b" is restarted
    And "w1" becomes idle
    Then the send returns "inject_timeout" within the inject bound
    And herdr on "b" records no inject into "w1"

  @RPL-1 @crash
  Scenario: a reply held for the main survives the main's gateway crash and is drained once
    When "w1" replies "the fix is in"
    Then within 10 seconds the inbox of "lead" holds 0 ready and 1 unacknowledged message
    When the gateway on "a" is killed with SIGKILL
    And the gateway on "a" is restarted
    And "lead" is waiting for a message
    Then the wait returns a REPLY from "w1" with text "the fix is in" within 10 seconds
    And the inbox of "lead" holds no message within 10 seconds
    When "lead" polls all messages
    Then "lead" gets no message

  @FWD-1 @FWD-5 @FWD-7 @crash @cap-submit-confirm
  Scenario: a crash after the inject but before INJECTED: one inject, a failure at the sender, no duplicate
    Given "w1" is idle
    And "w1" takes input without starting to work
    When "lead" sends "ship it" to "w1"
    Then herdr on "b" received exactly 1 input of "ship it" into "w1"
    When the gateway on "b" is killed with SIGKILL
    Then the send returns "inject_timeout" within the inject bound
    When the gateway on "b" is restarted
    Then herdr on "b" received exactly 1 input of "ship it" into "w1"
    And the inbox of "w1" holds no message
