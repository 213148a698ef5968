import { generateText, tool } from 'ai';
import { z } from 'zod';
import { modelId, provider, report, sampling } from './common.mjs';

await report(async () => {
  const result = await generateText({
    model: provider.chatModel(modelId),
    prompt: "What's the weather in Paris?",
    // No execute: the SDK returns the call instead of running it and asking again.
    tools: {
      get_weather: tool({
        description: 'Current weather in a city',
        inputSchema: z.object({ city: z.string().max(40) }),
      }),
    },
    toolChoice: { type: 'tool', toolName: 'get_weather' },
    ...sampling,
  });
  return { toolCalls: result.toolCalls, finishReason: result.finishReason };
});
