@topology
Feature: Topology — what a gateway declares on the broker (SPEC §1)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"

  @TOP-1 @TOP-4 @smoke
  Scenario: a booted gateway has declared the exchanges and the capped dead-letter queue
    Then the broker holds the exchanges and the dead-letter queue of SPEC §1

  @TOP-2 @TOP-4 @CON-2 @CAP-1
  Scenario: an entity's inbox carries the four arguments, its bindings, and one exclusive consumer
    Then the inbox of "lead" is durable with the four arguments and bound to its gid and broadcast.all
    And the inbox of "lead" has one consumer, and a second exclusive consumer is refused
    And the consumer of the inbox of "lead" is exclusive, acknowledges manually and is prefetch-bounded

  @CON-2
  Scenario: a healthy start logs no line at ERROR, so that an ERROR line means a refusal
    Then no gateway has logged a line at ERROR since it started

  @TOP-3
  Scenario: a gateway declares and consumes its control and roster queues
    Then host "a" has its control and roster queues

  @TOP-1 @cap-delay
  Scenario: a gateway that declares bridge.delay gives it the type of SPEC §1, where the broker has it
    Then bridge.delay is declared as SPEC §1 says where the broker knows x-delayed-message, and absent where not
    And every gateway is still ready
