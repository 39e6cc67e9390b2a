@herdr-faults
Feature: herdr misbehaving — every failed inject is a visible FAILED, the gateway stays up (SPEC §5)

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @FWD-7 @FWD-4 @cap-submit-confirm
  Scenario: herdr answers ok but nothing was submitted: FAILED not_submitted, not INJECTED
    Given "w1" is idle
    When herdr on "b" swallows input
    And "lead" sends "update the changelog" to "w1"
    Then the send returns "failed" with reason "not_submitted" within the inject bound
    And herdr on "b" records "update the changelog" as swallowed in "w1"

  @FWD-7 @FWD-4 @cap-submit-confirm
  Scenario: the agent reads the brief but never reports working: FAILED not_submitted, not INJECTED
    Given "w1" is idle
    And "w1" reads its input but never reports working
    When "lead" sends "rebase the feature branch" to "w1"
    Then the send returns "failed" with reason "not_submitted" within the inject bound
    And herdr on "b" received exactly 1 input of "rebase the feature branch" into "w1"

  @FWD-4
  Scenario: herdr is down: the brief fails visibly and the gateway stays up
    Given "w1" is idle
    When herdr on "b" is down
    And "lead" sends "tag the release" to "w1"
    Then the send returns "failed" with reason "busy" within the inject bound
    And the gateway on "b" is still ready

  @FWD-4 @SPN-5
  Scenario: the worker's pane was closed under the gateway: FAILED stopped
    When the pane of "w1" is closed under the gateway
    And "lead" sends "bisect the regression" to "w1"
    Then the send returns "failed" with reason "stopped" within the inject bound

  @FWD-2 @FWD-4 @C-20
  Scenario: the worker's agent has exited but herdr still shows it done: the brief is not typed into its shell
    Given "w1" is done
    And the agent of "w1" has exited, herdr still showing its last status
    When "lead" sends "echo this would run in the shell" to "w1"
    Then the send returns "failed" with reason "stopped" within the inject bound
    And herdr on "b" records nothing typed into "w1"
