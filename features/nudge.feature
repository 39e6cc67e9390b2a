@nudge
Feature: Nudges — a main with held messages is reminded in its pane, with backoff (SPEC §6, RPL-3)

  Background:
    Given a broker
    And gateways nudge after 300 ms
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @RPL-3 @RPL-1
  Scenario: a held reply nudges the main with growing gaps until it drains
    When "w1" replies "tests are green"
    Then herdr on "a" records at least 3 nudges into "lead" with growing gaps within 10 seconds
    When "lead" polls all messages
    Then "lead" gets exactly 1 message
    And herdr on "a" records no further nudge into "lead" while 2 nudge intervals pass

  @RPL-3 @RPL-2
  Scenario: no nudge while the main is waiting
    Given "lead" is waiting for a message
    When "w1" replies "done"
    Then the wait returns a REPLY from "w1" with text "done" within 10 seconds
    And herdr on "a" records no nudge into "lead" while 3 nudge intervals pass
