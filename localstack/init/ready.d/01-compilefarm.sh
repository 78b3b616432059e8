#!/bin/sh
# Creates what `broker serve --backend aws` and the compile function use:
# the content bucket, the node, environment and CA tables, and the urgent
# and bulk compile queues, each with a dead-letter queue (maxReceiveCount 3).
# The CA itself is made by `broker ca init` (see README.md).
set -eu
awslocal s3api create-bucket --bucket compilefarm
for t in nodes:certname environments:name ca:key; do
  table=${t%%:*} key=${t##*:}
  awslocal dynamodb create-table --table-name "compilefarm-$table" --billing-mode PAY_PER_REQUEST \
    --attribute-definitions AttributeName="$key",AttributeType=S --key-schema AttributeName="$key",KeyType=HASH
done
for lane in urgent bulk; do
  dlq_url=$(awslocal sqs create-queue --queue-name "compilefarm-$lane-dlq" --query QueueUrl --output text)
  dlq_arn=$(awslocal sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn --query Attributes.QueueArn --output text)
  awslocal sqs create-queue --queue-name "compilefarm-$lane" \
    --attributes "{\"VisibilityTimeout\":\"180\",\"RedrivePolicy\":\"{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":\\\"3\\\"}\"}"
done
echo "compilefarm resources ready"
