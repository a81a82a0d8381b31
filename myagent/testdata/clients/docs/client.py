# client.py
import asyncio
import json
import websockets
from datetime import datetime

class MyAgentClient:
    def __init__(self, url="ws://localhost:8080"):
        self.url = url
        self.websocket = None
        self.session_id = None

    async def connect(self):
        """连接到WebSocket服务器"""
        self.websocket = await websockets.connect(self.url)
        print("✅ 连接成功")
        
        # 启动消息处理循环
        asyncio.create_task(self.listen())

    async def listen(self):
        """监听服务器消息"""
        try:
            async for message in self.websocket:
                data = json.loads(message)
                await self.handle_message(data)
        except websockets.exceptions.ConnectionClosed:
            print("❌ 连接关闭")

    async def handle_message(self, data):
        """处理接收到的消息"""
        event = data.get('event')
        session_id = data.get('session_id')
        content = data.get('content')

        if event == 'system.connected':
            await self.create_session()
        elif event == 'agent.session_created':
            self.session_id = session_id
            print(f"🚀 会话创建成功: {session_id}")
        elif event == 'agent.thinking':
            print(f"💭 {content}")
        elif event == 'agent.final_answer':
            print(f"🎯 Agent回答: {content}")
        elif event in ['agent.error', 'system.error']:
            print(f"❌ 错误: {content}")
        else:
            print(f"📨 其他消息: {data}")

    async def create_session(self):
        """创建会话"""
        message = {
            "event": "user.create_session",
            "timestamp": datetime.now().isoformat(),
            "content": "create_session"
        }
        await self.send(message)

    async def send_message(self, content):
        """发送用户消息"""
        if not self.session_id:
            print("会话未创建")
            return

        message = {
            "session_id": self.session_id,
            "event": "user.message",
            "timestamp": datetime.now().isoformat(),
            "content": content
        }
        await self.send(message)

    async def send(self, message):
        """发送消息到服务器"""
        await self.websocket.send(json.dumps(message))

# 使用示例
async def main():
    client = MyAgentClient()
    
    await client.connect()
    
    # 等待会话创建
    await asyncio.sleep(1)
    
    # 发送测试消息
    await client.send_message("你好，请介绍一下自己")
    
    # 保持连接
    await asyncio.sleep(10)

if __name__ == "__main__":
    asyncio.run(main())
