@foreground @cap-foreground-identity @c23-unread
Feature: A brief typed and never read — the agent in front, shown ready, that ignores its input (SPEC [C-23], CONTRACT §4)

  No rule can keep a brief from an agent that is in front, shown idle, and never reads what it is
  given (measured on real herdr v0.8.2, 2026-12-06: a program named `claude` that ignores its
  input; herdr shows it `idle`). FWD-7 ends that brief `not_submitted`, but the line stays in the
  terminal's input, and the shell runs it when the program ends. [C-23]: the FAILED says so
  (`"typed": true` in its body), and nothing more is typed into that pane until its agent is seen
  acting again (herdr's `state_change_seq` moved). The inject bound is 10 seconds here, so a brief
  that waits for that ends within the bound less the 5 s submit confirm ([C-12]).

  Background:
    Given a broker
    And the gateways' inject bound is 10 seconds
    And host "a" runs a gateway with a main "lead"

  @FWD-7 @FWD-2 @FWD-4
  Scenario: an agent shown idle that never reads: the brief ends not_submitted saying it was typed, nothing more is typed until the agent acts, then briefs flow again
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead", its agent reporting its own status
    And the probe watches the wire
    When the agent of "w1" stops reading its terminal, still shown ready
    And "lead" sends "first brief" to "w1"
    Then the send returns "failed" with reason "not_submitted" within the inject bound
    And the FAILED "not_submitted" on the wire says the brief was typed
    When "lead" sends "second brief" to "w1"
    Then the send returns "failed" within the inject bound
    And herdr on "b" records nothing typed into "w1" after its first brief
    When the agent of "w1" reads its terminal again and reports working, then idle
    And "lead" sends "third brief" to "w1"
    Then the send returns "injected" within the inject bound
    And herdr on "b" records exactly 1 inject into "w1" with text "third brief"
