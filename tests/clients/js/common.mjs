// What every check shares: `node <check>.mjs <base_url> <model>` builds the provider from its
// arguments, runs the check and prints one JSON document on stdout for tests/test_clients.py.
// The API key comes from API_KEY (the server requires one, as deployed).
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

// The SDK's warnings (generateObject is deprecated in ai 7) would only clutter stderr.
globalThis.AI_SDK_LOG_WARNINGS = false;

export const [baseURL, modelId] = process.argv.slice(2);

// supportsStructuredOutputs: generateObject then sends response_format json_schema, which
// the server decodes under the schema's grammar (without it the model free-writes JSON).
export const provider = createOpenAICompatible({
  name: 'mlx-django-server',
  baseURL,
  apiKey: process.env.API_KEY,
  supportsStructuredOutputs: true,
  // Streams then ask for usage (stream_options.include_usage), as OpenAI's own provider does.
  includeUsage: true,
});

// Greedy and short, as the Python checks ask: the answers are then the same on every run.
export const sampling = { temperature: 0, maxOutputTokens: 100, maxRetries: 0 };

export async function report(check) {
  try {
    process.stdout.write(JSON.stringify(await check()) + '\n');
  } catch (error) {
    process.stdout.write(JSON.stringify({ error: String(error), cause: error?.responseBody }) + '\n');
    process.exitCode = 1;
  }
}
