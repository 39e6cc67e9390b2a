@publish
Feature: Publishing — confirmed, mandatory, and unroutable fails fast (SPEC §4)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"

  @PUB-2 @smoke
  Scenario: a send to a gid with no inbox fails fast with no_route
    When "lead" sends "hello?" to an unknown gid
    Then the send fails fast, well under the inject bound

  # The suite makes the broker nack by a policy (max-length 0, reject-publish); RabbitMQ 3.10 does
  # not apply it to a quorum inbox that has its own arguments, so on quorum inboxes the nack path is
  # judged by cluster.feature's CLU-4 scenario (an inbox at its cap) instead.
  @PUB-3 @classic-inbox
  Scenario: a publish the broker nacks fails the send at once, not at the inject bound
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    When the broker nacks every message published to the inbox of "w1"
    And "lead" sends "are you there?" to "w1"
    Then the send returns "failed" within 5 seconds
    And herdr on "b" records no inject into "w1"
    And the gateway on "a" is still ready

  @PUB-1
  Scenario: a gateway publishes on confirm-mode channels that hold none of its consumers
    Given host "b" connects with its own login
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    Then the gateway of "b" publishes only on confirm-mode channels that hold no consumer
