@forward-path
Feature: Forward path — a brief into a worker is delivered at most once (SPEC §5)

  A main's brief reaches a worker on another host through both gateways and the broker. The
  worker's gateway acks before it injects, so a redelivery can never inject twice; the sender
  learns the outcome from INJECTED or FAILED, or from its own inject bound.

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @FWD-1 @FWD-2 @FWD-3 @smoke
  Scenario: an idle worker gets the brief once and the sender learns it landed
    Given "w1" is idle
    When "lead" sends "fix the flaky test" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "fix the flaky test"
    And the send returns "injected" within 5 seconds
    And the inbox of "w1" holds no message
    And herdr on "b" records exactly 1 inject into "w1" with text "fix the flaky test"

  @FWD-1 @FWD-2 @smoke
  Scenario: the brief is acked before the inject, while the worker is still busy
    Given "w1" is working
    When "lead" sends "review PR 12" to "w1"
    Then within 5 seconds the broker shows the brief to "w1" acked, with nothing ready or unacknowledged
    And the send is still waiting for its outcome
    And herdr on "b" records no inject into "w1"
    When "w1" becomes idle
    Then herdr on "b" records exactly 1 inject into "w1" with text "review PR 12"
    And the send returns "injected" within 5 seconds

  @FWD-2 @FWD-3 @herdr-done
  Scenario: a worker that finished its first brief shows done, and the second brief is injected all the same
    Given "w1" is idle
    When "lead" sends "write the tests" to "w1"
    Then the send returns "injected" within 5 seconds
    When "w1" becomes idle
    Then herdr on "b" shows "w1" as done
    When "lead" sends "now make them pass" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "now make them pass"
    And the send returns "injected" within 5 seconds

  @FWD-2 @FWD-4 @ENV-3
  Scenario: a worker busy past the inject bound gets nothing, and the sender learns it was busy
    Given "w1" is working
    And the probe watches the wire
    When "lead" sends "refactor the parser" to "w1"
    Then the send returns "failed" with reason "busy" within the inject bound
    And herdr on "b" records no inject into "w1"
    And the FAILED for "lead"'s send carries the send's traceId

  @FWD-5 @FWD-1
  Scenario: a silent worker gateway costs the sender a visible inject_timeout, and its brief lands once later
    Given "w1" is idle
    When the gateway on "b" is frozen with SIGSTOP
    And "lead" sends "bump the version" to "w1"
    Then the send returns "inject_timeout" within the inject bound
    And herdr on "b" records no inject into "w1"
    When the gateway on "b" is thawed with SIGCONT
    Then herdr on "b" records exactly 1 inject into "w1" with text "bump the version"
    And "lead" drains an INJECTED notice for the send within 10 seconds
    And the inbox of "w1" holds no message

  @FWD-1 @SIG-2
  Scenario: a brief judged after a freeze waits until the roster backlog is applied ([C-10])
    Given "w1" is idle
    When the gateway on "b" is frozen with SIGSTOP
    And the gateway on "a" is frozen with SIGSTOP
    And 1000 heartbeats of other hosts' entities queue up in every roster
    And the gateway on "a" is thawed with SIGCONT
    And "lead" sends "rebase on main" to "w1"
    And the presence of "lead" outlives its TTL while the gateway on "b" is frozen
    And the gateway on "b" is thawed with SIGCONT
    Then the gateway on "b" has worked through its roster backlog
    And herdr on "b" records exactly 1 inject into "w1" with text "rebase on main"
    And the inbox of "w1" holds no message
