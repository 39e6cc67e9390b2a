@soak
Feature: Soak — at most once into workers and at least once into mains, under a nemesis (SPEC §5, §6, §12)

  Not in the default run: `scripts/soak` runs it (FLEET_E2E_SOAK=1). Gateways are killed, frozen
  and cut off from the broker while briefs and replies flow; a history checker then classifies
  every operation and fails on anything lost, unexpected or duplicated.

  Background:
    Given a broker
    And the gateways' inject bound is 6 seconds
    And gateways use an AMQP heartbeat of 2 seconds
    And gateways reach the broker through a link the suite can cut
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And host "c" runs a gateway with a worker "w2" whose parent is "lead"
    And "w1" finishes each brief quickly
    And "w2" finishes each brief quickly

  @FWD-1 @FWD-5 @FWD-6 @RPL-1 @CON-3
  Scenario: 1000+ operations across three hosts under kills, freezes and cuts
    When "lead" sends 250 briefs to each of "w1" and "w2", which reply 250 times each, while a nemesis strikes every 2500 ms
    Then after healing, the history of "lead" with "w1" and "w2" shows nothing lost, unexpected or duplicated
