@herdr-faults @older-herdr
Feature: An older herdr, without pane.process_info — the status gate alone decides (SPEC §5 [C-20]'s fallback, RPL-3)

  [C-20] asks herdr who holds a pane's terminal before typing. A herdr that does not know
  `pane.process_info` answers it as any unknown method (`invalid_request`); a gateway then leaves
  the status gate alone to decide: briefs and nudges are typed as before [C-20], nothing waits on
  the missing method, and nothing is taken for "agent gone".

  Background:
    Given a broker
    And the gateways' inject bound is 8 seconds
    And gateways nudge after 300 ms
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And herdr on "a" is an older herdr, without pane.process_info
    And herdr on "b" is an older herdr, without pane.process_info

  @FWD-2 @FWD-7 @C-20
  Scenario: a brief to an idle worker is injected, typed once
    Given "w1" is idle
    When "lead" sends "write the release notes" to "w1"
    Then the send returns "injected" within the inject bound
    And herdr on "b" records exactly 1 inject into "w1" with text "write the release notes"
    And the gateway on "b" is still ready

  @FWD-2 @FWD-4 @C-20
  Scenario: a worker that stays working still ends busy at the bound, nothing typed
    Given "w1" is working
    When "lead" sends "echo never typed" to "w1"
    Then the send returns "failed" with reason "busy" within the inject bound
    And herdr on "b" records nothing typed into "w1"
    And the gateway on "b" is still ready

  @RPL-3 @C-20
  Scenario: a nudge is still typed into a main's pane
    When "w1" replies "tests are green"
    Then herdr on "a" records a nudge into "lead" within 5 seconds
